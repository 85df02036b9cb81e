// The template parser (see jinja_parser.h): recursive descent over the lexer's tokens, one function per
// precedence level, as @huggingface/jinja's parser is laid out, with Python Jinja's test arguments added.
#include "tokenize/jinja_parser.h"

#include <attend/error.h>

#include <fmt/format.h>

#include <charconv>
#include <initializer_list>
#include <set>

namespace attend::tokenize::jinja {

namespace {

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, std::string_view source, std::string_view origin, int max_depth)
      : tokens_(tokens), source_(source), origin_(origin), max_depth_(max_depth) {}

  Body program() {
    Body body;
    while (cur_ < tokens_.size()) parse_any(body);
    return body;
  }

 private:
  const std::vector<Token>& tokens_;
  std::string_view source_, origin_;
  int max_depth_;
  size_t cur_ = 0;
  int depth_ = 0;

  // Counts nesting while parsing one level deeper; past max_depth the template is refused.
  struct Deeper {
    Parser& p;
    explicit Deeper(Parser& parser) : p(parser) {
      if (++p.depth_ > p.max_depth_) p.fail_here(fmt::format("nesting deeper than the limit of {}", p.max_depth_));
    }
    ~Deeper() { --p.depth_; }
  };

  const Token* peek(size_t ahead = 0) const { return cur_ + ahead < tokens_.size() ? &tokens_[cur_ + ahead] : nullptr; }
  uint32_t here() const { return peek() ? peek()->pos : static_cast<uint32_t>(source_.size()); }
  [[noreturn]] void fail_at(uint32_t pos, const std::string& what) const {
    const Location loc = locate(source_, pos);
    throw Error(fmt::format("{}:{}:{}: {}", origin_, loc.line, loc.column, what));
  }
  [[noreturn]] void fail_here(const std::string& what) const { fail_at(here(), what); }
  [[noreturn]] void expected(std::string_view what) const {
    fail_here(fmt::format("expected {}, found {}", what, describe(peek())));
  }

  bool is(Tok type, size_t ahead = 0) const { return peek(ahead) && peek(ahead)->type == type; }
  bool is_name(std::string_view name, size_t ahead = 0) const { return is(Tok::Name, ahead) && peek(ahead)->value == name; }
  const Token& expect(Tok type, std::string_view what) {
    if (!is(type)) expected(what);
    return tokens_[cur_++];
  }
  void expect_name(std::string_view name) {
    if (!is_name(name)) expected(fmt::format("'{}'", name));
    ++cur_;
  }
  // At "{% NAME" for one of the names?
  bool at_statement(std::initializer_list<std::string_view> names) const {
    if (!is(Tok::OpenStatement) || !is(Tok::Name, 1)) return false;
    for (std::string_view n : names)
      if (peek(1)->value == n) return true;
    return false;
  }
  // Parses statements into `body` until "{% NAME" for one of the names (left unconsumed).
  void block_until(Body& body, std::initializer_list<std::string_view> names, std::string_view opener, uint32_t opened_at) {
    while (!at_statement(names)) {
      if (!peek()) {
        std::string list;
        for (std::string_view n : names) list += fmt::format("{}{{% {} %}}", list.empty() ? "" : " or ", n);
        const Location loc = locate(source_, opened_at);
        fail_here(fmt::format("expected {} to close the '{}' of line {}, column {}, found the end of the template", list,
                              opener, loc.line, loc.column));
      }
      parse_any(body);
    }
  }
  void end_block(std::string_view name) {
    expect(Tok::OpenStatement, fmt::format("'{{% {} %}}'", name));
    expect_name(name);
    expect(Tok::CloseStatement, "'%}'");
  }

  static ExprPtr node(Expr::Kind kind, uint32_t pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }
  static StmtPtr stmt(Stmt::Kind kind, uint32_t pos) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->pos = pos;
    return s;
  }

  void parse_any(Body& body) {
    Deeper deeper(*this);
    const Token& t = tokens_[cur_];
    switch (t.type) {
      case Tok::Comment: ++cur_; return;
      case Tok::Text: {
        auto s = stmt(Stmt::Kind::Text, t.pos);
        s->text = t.value;
        ++cur_;
        body.push_back(std::move(s));
        return;
      }
      case Tok::OpenExpression: {
        ++cur_;
        auto s = stmt(Stmt::Kind::Output, t.pos);
        s->expr = expression();
        expect(Tok::CloseExpression, "'}}'");
        body.push_back(std::move(s));
        return;
      }
      case Tok::OpenStatement: body.push_back(statement()); return;
      default: expected("text, '{{' or '{%'");
    }
  }

  StmtPtr statement() {
    const uint32_t start = here();
    ++cur_;  // {%
    if (!is(Tok::Name)) expected("a statement name");
    const std::string name = peek()->value;
    ++cur_;
    if (name == "set") return set_statement(start);
    if (name == "if") {
      StmtPtr s = if_statement(start);
      end_block("endif");
      return s;
    }
    if (name == "for") return for_statement(start);
    if (name == "macro") return macro_statement(start);
    if (name == "call") return call_statement(start);
    if (name == "filter") {
      auto s = stmt(Stmt::Kind::FilterBlock, start);
      s->expr = filter_of(nullptr);
      expect(Tok::CloseStatement, "'%}'");
      block_until(s->body, {"endfilter"}, "filter", start);
      end_block("endfilter");
      return s;
    }
    if (name == "break" || name == "continue") {
      expect(Tok::CloseStatement, "'%}'");
      return stmt(name == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, start);
    }
    static const std::set<std::string_view> closers = {"endif", "elif", "else", "endfor", "endset", "endmacro", "endcall", "endfilter"};
    if (closers.count(name)) fail_at(start, fmt::format("'{{% {} %}}' without the statement it would close", name));
    fail_at(start, fmt::format("unknown statement '{}' (expected set, if, for, macro, call, filter, break or continue)", name));
  }

  StmtPtr set_statement(uint32_t start) {
    auto s = stmt(Stmt::Kind::Set, start);
    s->target = expression_sequence(false);
    if (is(Tok::Equals)) {
      ++cur_;
      s->expr = expression_sequence(false);
    } else {
      expect(Tok::CloseStatement, "'=' or '%}'");
      block_until(s->body, {"endset"}, "set", start);
      expect(Tok::OpenStatement, "'{%'");
      expect_name("endset");
    }
    expect(Tok::CloseStatement, "'%}'");
    return s;
  }

  StmtPtr if_statement(uint32_t start) {
    auto s = stmt(Stmt::Kind::If, start);
    s->expr = expression();
    expect(Tok::CloseStatement, "'%}'");
    block_until(s->body, {"elif", "else", "endif"}, "if", start);
    if (at_statement({"elif"})) {
      const uint32_t elif_at = here();
      cur_ += 2;
      s->orelse.push_back(if_statement(elif_at));
    } else if (at_statement({"else"})) {
      cur_ += 2;
      expect(Tok::CloseStatement, "'%}'");
      block_until(s->orelse, {"endif"}, "if", start);
    }
    return s;
  }

  StmtPtr for_statement(uint32_t start) {
    auto s = stmt(Stmt::Kind::For, start);
    s->target = expression_sequence(true);
    const bool names_only = s->target->kind == Expr::Kind::Name ||
                            (s->target->kind == Expr::Kind::Tuple && [&] {
                              for (const auto& c : s->target->children)
                                if (c->kind != Expr::Kind::Name) return false;
                              return true;
                            }());
    if (!names_only) fail_at(s->target->pos, "expected a name or names separated by commas after 'for'");
    expect_name("in");
    ExprPtr iterable = expression();
    if (iterable->kind == Expr::Kind::Select) {  // for x in items if condition
      s->condition = std::move(iterable->children[1]);
      iterable = std::move(iterable->children[0]);
    }
    s->expr = std::move(iterable);
    expect(Tok::CloseStatement, "'%}'");
    block_until(s->body, {"endfor", "else"}, "for", start);
    if (at_statement({"else"})) {
      cur_ += 2;
      expect(Tok::CloseStatement, "'%}'");
      block_until(s->orelse, {"endfor"}, "for", start);
    }
    end_block("endfor");
    return s;
  }

  StmtPtr macro_statement(uint32_t start) {
    auto s = stmt(Stmt::Kind::Macro, start);
    s->text = expect(Tok::Name, "the macro's name").value;
    s->params = parameters();
    expect(Tok::CloseStatement, "'%}'");
    block_until(s->body, {"endmacro"}, "macro", start);
    end_block("endmacro");
    return s;
  }

  StmtPtr call_statement(uint32_t start) {
    auto s = stmt(Stmt::Kind::CallBlock, start);
    if (is(Tok::LParen)) s->params = parameters();
    const Token& callee = expect(Tok::Name, "the name of the macro to call");
    auto call = node(Expr::Kind::Call, callee.pos);
    auto name = node(Expr::Kind::Name, callee.pos);
    name->name = callee.value;
    call->children.push_back(std::move(name));
    arguments(call->children);
    s->expr = std::move(call);
    expect(Tok::CloseStatement, "'%}'");
    block_until(s->body, {"endcall"}, "call", start);
    end_block("endcall");
    return s;
  }

  // (a, b=default) of a macro or call block.
  std::vector<Param> parameters() {
    expect(Tok::LParen, "'('");
    std::vector<Param> params;
    std::set<std::string> seen;
    while (!is(Tok::RParen)) {
      const Token& t = expect(Tok::Name, "a parameter name");
      Param p{t.value, nullptr};
      if (is(Tok::Equals)) {
        ++cur_;
        p.default_value = expression();
      } else if (!params.empty() && params.back().default_value) {
        fail_at(t.pos, fmt::format("parameter '{}' without a default follows one with a default", t.value));
      }
      if (!seen.insert(p.name).second) fail_at(t.pos, fmt::format("parameter '{}' is named twice", p.name));
      params.push_back(std::move(p));
      if (is(Tok::Comma)) ++cur_;
      else if (!is(Tok::RParen)) expected("',' or ')'");
    }
    ++cur_;
    return params;
  }

  // (args) of a call, appended to `out`: positional, *spread, name=value, **spread.
  void arguments(std::vector<ExprPtr>& out) {
    expect(Tok::LParen, "'('");
    bool keyword_seen = false, spread_seen = false;
    while (!is(Tok::RParen)) {
      if (!peek()) expected("')'");
      const uint32_t at = here();
      if (is(Tok::Power)) {
        ++cur_;
        auto e = node(Expr::Kind::KwSpread, at);
        e->children.push_back(expression());
        out.push_back(std::move(e));
        if (is(Tok::Comma)) ++cur_;
        if (!is(Tok::RParen)) expected("')' after the '**' argument, which must come last");
        break;
      }
      if (is(Tok::Multiplicative) && peek()->value == "*") {
        if (spread_seen) fail_here("only one '*' argument is allowed");
        spread_seen = true;
        ++cur_;
        auto e = node(Expr::Kind::Spread, at);
        e->children.push_back(expression());
        out.push_back(std::move(e));
      } else {
        ExprPtr arg = expression();
        if (is(Tok::Equals)) {
          if (arg->kind != Expr::Kind::Name) fail_at(arg->pos, "expected a name before '=' in a keyword argument");
          ++cur_;
          auto kw = node(Expr::Kind::Keyword, arg->pos);
          kw->name = arg->name;
          kw->children.push_back(expression());
          arg = std::move(kw);
          keyword_seen = true;
        } else if (keyword_seen) {
          fail_at(arg->pos, "a positional argument follows a keyword argument");
        } else if (spread_seen) {
          fail_at(arg->pos, "a positional argument follows the '*' argument");
        }
        out.push_back(std::move(arg));
      }
      if (is(Tok::Comma)) ++cur_;
      else if (!is(Tok::RParen)) expected("',' or ')'");
    }
    ++cur_;
  }

  ExprPtr expression_sequence(bool primary_only) {
    const uint32_t start = here();
    ExprPtr first = primary_only ? primary() : expression();
    if (!is(Tok::Comma)) return first;
    auto tuple = node(Expr::Kind::Tuple, start);
    tuple->children.push_back(std::move(first));
    while (is(Tok::Comma)) {
      ++cur_;
      tuple->children.push_back(primary_only ? primary() : expression());
    }
    return tuple;
  }

  ExprPtr expression() {
    Deeper deeper(*this);
    const uint32_t start = here();
    ExprPtr a = logical_or();
    if (!is_name("if")) return a;
    ++cur_;
    ExprPtr test = logical_or();
    if (is_name("else")) {
      ++cur_;
      auto t = node(Expr::Kind::Ternary, start);
      t->children.push_back(std::move(test));
      t->children.push_back(std::move(a));
      t->children.push_back(expression());
      return t;
    }
    auto s = node(Expr::Kind::Select, start);
    s->children.push_back(std::move(a));
    s->children.push_back(std::move(test));
    return s;
  }

  ExprPtr binary(std::string op, ExprPtr left, ExprPtr right) {
    auto b = node(Expr::Kind::Binary, left->pos);
    b->name = std::move(op);
    b->children.push_back(std::move(left));
    b->children.push_back(std::move(right));
    return b;
  }

  ExprPtr logical_or() {
    ExprPtr left = logical_and();
    while (is_name("or")) {
      ++cur_;
      left = binary("or", std::move(left), logical_and());
    }
    return left;
  }
  ExprPtr logical_and() {
    ExprPtr left = logical_not();
    while (is_name("and")) {
      ++cur_;
      left = binary("and", std::move(left), logical_not());
    }
    return left;
  }
  ExprPtr logical_not() {
    if (!is_name("not")) return comparison();
    Deeper deeper(*this);
    auto u = node(Expr::Kind::Unary, here());
    ++cur_;
    u->name = "not";
    u->children.push_back(logical_not());
    return u;
  }
  ExprPtr comparison() {
    ExprPtr left = additive();
    for (;;) {
      std::string op;
      if (is_name("not") && is_name("in", 1)) {
        op = "not in";
        cur_ += 2;
      } else if (is_name("in") || is(Tok::Comparison)) {
        op = tokens_[cur_++].value;
      } else {
        return left;
      }
      left = binary(std::move(op), std::move(left), additive());
    }
  }
  ExprPtr additive() {
    ExprPtr left = multiplicative();
    while (is(Tok::Additive)) {
      std::string op = tokens_[cur_++].value;
      left = binary(std::move(op), std::move(left), multiplicative());
    }
    return left;
  }
  ExprPtr multiplicative() {
    ExprPtr left = power();
    while (is(Tok::Multiplicative)) {
      std::string op = tokens_[cur_++].value;
      left = binary(std::move(op), std::move(left), power());
    }
    return left;
  }
  ExprPtr power() {
    ExprPtr left = test();
    while (is(Tok::Power)) {
      ++cur_;
      left = binary("**", std::move(left), test());
    }
    return left;
  }
  ExprPtr test() {
    ExprPtr operand = filtered();
    while (is_name("is")) {
      ++cur_;
      auto t = node(Expr::Kind::Test, operand->pos);
      if (is_name("not")) {
        t->negate = true;
        ++cur_;
      }
      t->name = expect(Tok::Name, "the name of a test").value;
      t->children.push_back(std::move(operand));
      if (is(Tok::LParen)) arguments(t->children);
      operand = std::move(t);
    }
    return operand;
  }
  // `name` or `name(args)` after a "|" (or in a filter block), applied to `operand`.
  ExprPtr filter_of(ExprPtr operand) {
    auto f = node(Expr::Kind::Filter, here());
    f->name = expect(Tok::Name, "the name of a filter").value;
    f->children.push_back(std::move(operand));
    if (is(Tok::LParen)) arguments(f->children);
    return f;
  }
  ExprPtr filtered() {
    ExprPtr operand = unary();
    while (is(Tok::Pipe)) {
      ++cur_;
      const uint32_t start = operand->pos;
      operand = filter_of(std::move(operand));
      operand->pos = start;
    }
    return operand;
  }
  ExprPtr unary() {
    if ((is(Tok::Unary) || is(Tok::Additive)) && (peek()->value == "-" || peek()->value == "+")) {
      Deeper deeper(*this);
      auto u = node(Expr::Kind::Unary, here());
      u->name = tokens_[cur_++].value;
      u->children.push_back(unary());
      return u;
    }
    return postfix(primary());
  }
  // Calls, attributes and subscripts after a primary: f(x).y[0](z)...
  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (is(Tok::LParen)) {
        auto call = node(Expr::Kind::Call, e->pos);
        call->children.push_back(std::move(e));
        arguments(call->children);
        e = std::move(call);
      } else if (is(Tok::Dot)) {
        ++cur_;
        auto m = node(Expr::Kind::Member, e->pos);
        auto key = node(Expr::Kind::Literal, here());
        if (is(Tok::Name)) key->value = Value::from_string(tokens_[cur_].value);
        else if (is(Tok::Number) && peek()->value.find_first_of(".-+") == std::string::npos) key->value = integer(*peek());
        else expected("a name or an index after '.'");
        ++cur_;
        m->children.push_back(std::move(e));
        m->children.push_back(std::move(key));
        e = std::move(m);
      } else if (is(Tok::LBracket)) {
        ++cur_;
        e = subscript(std::move(e));
      } else {
        return e;
      }
    }
  }
  // After "[": an index, or a slice start:stop:step with any part left out.
  ExprPtr subscript(ExprPtr object) {
    const uint32_t start = object->pos;
    std::vector<ExprPtr> parts;
    bool slice = false;
    while (!is(Tok::RBracket)) {
      if (!peek()) expected("']'");
      if (is(Tok::Colon)) {
        parts.push_back(nullptr);
        ++cur_;
        slice = true;
      } else {
        parts.push_back(expression());
        if (is(Tok::Colon)) {
          ++cur_;
          slice = true;
        } else if (!is(Tok::RBracket)) {
          expected("':' or ']'");
        }
      }
    }
    ++cur_;
    if (parts.empty()) fail_at(start, "expected an index or a slice inside '[]'");
    if (!slice) {
      if (parts.size() != 1) fail_at(start, "expected one index inside '[]'");
      auto m = node(Expr::Kind::Member, start);
      m->children.push_back(std::move(object));
      m->children.push_back(std::move(parts[0]));
      return m;
    }
    if (parts.size() > 3) fail_at(start, "a slice has at most three parts (start:stop:step)");
    auto s = node(Expr::Kind::Slice, start);
    s->children.push_back(std::move(object));
    parts.resize(3);
    for (auto& p : parts) s->children.push_back(std::move(p));
    return s;
  }

  Value integer(const Token& t) const {
    int64_t v = 0;
    const char* b = t.value.data();
    const auto [end, ec] = std::from_chars(b + (t.value[0] == '+' ? 1 : 0), b + t.value.size(), v);
    if (ec != std::errc() || end != b + t.value.size()) fail_at(t.pos, fmt::format("the integer {} is out of range", t.value));
    return Value::from_int(v);
  }

  ExprPtr primary() {
    const Token* t = peek();
    if (!t) expected("an expression");
    const uint32_t at = t->pos;
    switch (t->type) {
      case Tok::Number: {
        ++cur_;
        auto e = node(Expr::Kind::Literal, at);
        if (t->value.find('.') != std::string::npos) e->value = Value::from_float(std::strtod(t->value.c_str(), nullptr));
        else e->value = integer(*t);
        return e;
      }
      case Tok::String: {
        std::string s;
        while (is(Tok::String)) s += tokens_[cur_++].value;  // 'a' 'b' is 'ab', as in Python
        auto e = node(Expr::Kind::Literal, at);
        e->value = Value::from_string(std::move(s));
        return e;
      }
      case Tok::Name: {
        ++cur_;
        auto e = node(Expr::Kind::Name, at);
        e->name = t->value;
        return e;
      }
      case Tok::LParen: {
        ++cur_;
        ExprPtr e = expression_sequence(false);
        expect(Tok::RParen, "')'");
        return e;
      }
      case Tok::LBracket: {
        ++cur_;
        auto e = node(Expr::Kind::List, at);
        while (!is(Tok::RBracket)) {
          if (!peek()) expected("']'");
          e->children.push_back(expression());
          if (is(Tok::Comma)) ++cur_;
          else if (!is(Tok::RBracket)) expected("',' or ']'");
        }
        ++cur_;
        return e;
      }
      case Tok::LBrace: {
        ++cur_;
        auto e = node(Expr::Kind::Dict, at);
        while (!is(Tok::RBrace)) {
          if (!peek()) expected("'}'");
          e->children.push_back(expression());
          expect(Tok::Colon, "':' between a key and its value");
          e->children.push_back(expression());
          if (is(Tok::Comma)) ++cur_;
          else if (!is(Tok::RBrace)) expected("',' or '}'");
        }
        ++cur_;
        return e;
      }
      default: expected("an expression");
    }
  }
};

}  // namespace

Body parse(const std::vector<Token>& tokens, std::string_view source, std::string_view origin, int max_depth) {
  return Parser(tokens, source, origin, max_depth).program();
}

}  // namespace attend::tokenize::jinja
