// The syntax tree of a template: expressions and statements, each with its offset in the source.
#pragma once

#include "tokenize/jinja_value.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attend::tokenize::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,   // value
    Name,      // name
    List,      // [a, b]: children
    Tuple,     // (a, b) or a, b: children
    Dict,      // {k: v}: children are key, value, key, value, ...
    Member,    // a.b, a[b], a.0: children[0] object, children[1] key
    Slice,     // a[start:stop:step]: children[0] object, then start, stop, step (null when left out)
    Call,      // f(args): children[0] callee, then the arguments
    Filter,    // x | name(args): children[0] operand (null in a filter block), then the arguments
    Test,      // x is [not] name(args): children[0] operand, then the arguments; negate
    Unary,     // op x: name is "not", "-" or "+"
    Binary,    // a op b: name is the operator ("and", "or", "in", "not in", "==", "+", "~", ...)
    Ternary,   // a if cond else b: children cond, a, b
    Select,    // a if cond (no else): undefined when cond is false; children a, cond
    Keyword,   // name=value in a call: children[0] value
    Spread,    // *list in a call
    KwSpread,  // **dict in a call
  };
  Kind kind;
  uint32_t pos;  // byte offset of the expression's first token in the source
  std::string name;
  Value value;
  bool negate = false;
  std::vector<ExprPtr> children;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// A macro's or call block's parameter: a name, with a default expression or without.
struct Param {
  std::string name;
  ExprPtr default_value;
};

struct Stmt {
  enum class Kind {
    Text,         // text
    Output,       // {{ expr }}
    Set,          // {% set target = expr %}, or {% set target %}body{% endset %} (expr null)
    If,           // {% if expr %}body{% elif ... %}{% else %}orelse{% endif %}; elif is an If in orelse
    For,          // {% for target in expr [if condition] %}body{% else %}orelse{% endfor %}
    Macro,        // {% macro name(params) %}body{% endmacro %}
    CallBlock,    // {% call(params) expr %}body{% endcall %}: expr is the Call
    FilterBlock,  // {% filter expr %}body{% endfilter %}: expr is a Filter without operand
    Break,
    Continue,
  };
  Kind kind;
  uint32_t pos;
  std::string text;       // Text; the macro's name
  ExprPtr expr;           // the expression of Output, Set, If, For (iterable), CallBlock, FilterBlock
  ExprPtr target;         // Set and For: a Name, a Tuple of Names, or (Set) a Member of a namespace
  ExprPtr condition;      // For: the "if" filter on items, or null
  std::vector<Param> params;
  Body body, orelse;
};

}  // namespace attend::tokenize::jinja
