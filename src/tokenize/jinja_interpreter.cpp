// The template interpreter (see jinja_interpreter.h). Operators follow @huggingface/jinja where it makes
// a choice (what `~` and `+` write, errors on none and undefined operands) and Python where JavaScript
// leaks through it (`%` and `//` floor toward minus infinity, `==` compares lists by value, division by
// zero is an error).
#include "tokenize/jinja_interpreter.h"

#include "tokenize/jinja_builtins.h"
#include "tokenize/jinja_lexer.h"

#include <attend/error.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace attend::tokenize::jinja {

Interpreter::~Interpreter() {
  for (const auto& ns : namespaces_) ns->clear();
}

std::string Interpreter::where(uint32_t pos) const {
  const Location loc = locate(source_, pos);
  return fmt::format("{}:{}:{}", origin_, loc.line, loc.column);
}

void Interpreter::charge(int64_t steps) {
  steps_ += steps;
  if (steps_ > limits_.max_steps)
    fail(fmt::format("the template ran past the limit of {} steps (a loop or recursion without end?)", limits_.max_steps));
}

void Interpreter::check_size(size_t n) const {
  if (n > limits_.max_output) fail(fmt::format("a value of {} bytes or items passes the limit of {}", n, limits_.max_output));
}

Value Interpreter::make_string(std::string s) {
  check_size(s.size());
  charge(static_cast<int64_t>(s.size() / 64));
  return Value::from_string(std::move(s));
}

void Interpreter::append(std::string& out, std::string_view text) {
  if (out.size() + text.size() > limits_.max_output)
    fail(fmt::format("the output passes the limit of {} bytes", limits_.max_output));
  charge(static_cast<int64_t>(text.size() / 64));
  out.append(text);
}

Value Interpreter::call(const Value& function, Args& args, const ScopePtr& scope) {
  if (function.kind != Value::Kind::Function) fail(fmt::format("a {} cannot be called", type_name(function)));
  return function.function->call(*this, args, scope);
}

std::string Interpreter::render(const Body& program, const ScopePtr& globals) {
  std::string out;
  if (exec(program, globals, out) != Flow::Normal)
    throw Error(fmt::format("{}: '{{% break %}}' or '{{% continue %}}' outside a for loop", origin_));
  return out;
}

std::string Interpreter::render_body(const Body& body, const ScopePtr& scope, std::string_view what) {
  std::string out;
  if (exec(body, scope, out) != Flow::Normal) fail(fmt::format("'{{% break %}}' or '{{% continue %}}' inside {} outside a for loop", what));
  return out;
}

Interpreter::Flow Interpreter::exec(const Body& body, const ScopePtr& scope, std::string& out) {
  for (const StmtPtr& s : body) {
    const Flow f = exec(*s, scope, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
  try {
    charge(1);
    switch (s.kind) {
      case Stmt::Kind::Text: append(out, s.text); return Flow::Normal;
      case Stmt::Kind::Output: {
        const Value v = eval(*s.expr, scope);
        if (!v.is_none() && !v.is_undefined()) append(out, to_output(v));
        return Flow::Normal;
      }
      case Stmt::Kind::Set: {
        if (s.expr) {
          exec_set(s, scope, eval(*s.expr, scope));
          return Flow::Normal;
        }
        std::string text;
        const Flow f = exec(s.body, scope, text);
        if (f == Flow::Normal) exec_set(s, scope, make_string(std::move(text)));
        return f;
      }
      case Stmt::Kind::If: return exec(truthy(eval(*s.expr, scope)) ? s.body : s.orelse, scope, out);
      case Stmt::Kind::For: return exec_for(s, scope, out);
      case Stmt::Kind::Macro: define_macro(s, scope); return Flow::Normal;
      case Stmt::Kind::CallBlock: exec_call_block(s, scope, out); return Flow::Normal;
      case Stmt::Kind::FilterBlock: {
        std::string text;
        const Flow f = exec(s.body, scope, text);
        if (f != Flow::Normal) return f;
        Args args = eval_args(*s.expr, 1, scope);
        const Value v = apply_filter(*this, s.expr->name, make_string(std::move(text)), args);
        if (!v.is_none() && !v.is_undefined()) append(out, to_output(v));
        return Flow::Normal;
      }
      case Stmt::Kind::Break: return Flow::Break;
      case Stmt::Kind::Continue: return Flow::Continue;
    }
  } catch (const Failure& f) {
    throw Error(fmt::format("{}: {}", where(s.pos), f.message));
  }
  return Flow::Normal;
}

void Interpreter::exec_set(const Stmt& s, const ScopePtr& scope, Value rhs) {
  const Expr& target = *s.target;
  if (target.kind == Expr::Kind::Name) {
    scope->set(target.name, std::move(rhs));
  } else if (target.kind == Expr::Kind::Tuple) {
    if (!rhs.is_list()) fail(fmt::format("cannot unpack a {} into {} names", type_name(rhs), target.children.size()));
    if (rhs.items().size() != target.children.size())
      fail(fmt::format("cannot unpack {} values into {} names", rhs.items().size(), target.children.size()));
    for (size_t i = 0; i < target.children.size(); ++i) {
      if (target.children[i]->kind != Expr::Kind::Name) fail("only names can be assigned in a tuple");
      scope->set(target.children[i]->name, rhs.items()[i]);
    }
  } else if (target.kind == Expr::Kind::Member) {
    const Value object = eval(*target.children[0], scope);
    if (object.kind != Value::Kind::Namespace)
      fail(fmt::format("cannot set an attribute of a {}: only a namespace() can be changed", type_name(object)));
    const Expr& key = *target.children[1];
    if (key.kind != Expr::Kind::Literal || !key.value.is_string()) fail("a namespace attribute is set by name (ns.name = ...)");
    object.dict->set(key.value.s(), std::move(rhs));
  } else {
    fail("expected a name, names separated by commas, or namespace.name to the left of '='");
  }
}

// `loop` for turn i of n: a new dict each turn, as @huggingface/jinja makes one. When nothing else holds the
// last turn's and it has loop's keys in loop's order, its entries (their vector and key strings) are taken over
// and given the new values (a {% set l = loop %} keeps its own; a dict the body set as `loop` is only taken
// when it is one).
void Interpreter::set_loop(Scope& scope, const std::vector<Value>& items, int64_t i) {
  static constexpr std::array<std::string_view, 9> kKeys = {"index", "index0", "revindex", "revindex0", "first",
                                                            "last", "length", "previtem", "nextitem"};
  const int64_t n = static_cast<int64_t>(items.size());
  const size_t at = static_cast<size_t>(i);
  std::array<Value, 9> values = {
      Value::from_int(i + 1),     Value::from_int(i),
      Value::from_int(n - i),     Value::from_int(n - i - 1),
      Value::from_bool(i == 0),   Value::from_bool(i == n - 1),
      Value::from_int(n),         i > 0 ? items[at - 1] : Value::undefined(),
      i < n - 1 ? items[at + 1] : Value::undefined()};
  Dict loop;
  if (auto it = scope.vars.find("loop"); it != scope.vars.end() && it->second.kind == Value::Kind::Dict &&
                                         it->second.dict.use_count() == 1 &&
                                         std::ranges::equal(it->second.dict->entries(), kKeys, {}, [](const auto& e) {
                                           return std::string_view(e.first);
                                         })) {
    loop = std::move(*it->second.dict);
    for (size_t k = 0; k < kKeys.size(); ++k) loop.set_at(k, std::move(values[k]));
  } else {
    for (size_t k = 0; k < kKeys.size(); ++k) loop.set(kKeys[k], std::move(values[k]));
  }
  scope.set("loop", Value::from_dict(std::move(loop)));
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
  auto loop_scope = std::make_shared<Scope>(scope);
  const Value iterable = eval(*s.expr, loop_scope);
  std::vector<Value> made;  // a dict's keys, a string's characters
  const std::vector<Value>* source = &made;
  if (iterable.is_list()) {
    source = &iterable.items();
  } else if (iterable.is_dict()) {  // a dict iterates over its keys
    for (const auto& [key, v] : iterable.dict->entries()) made.push_back(Value::from_string(key));
  } else if (iterable.is_string()) {  // Python iterates over the characters
    for (std::string_view c : code_points(iterable.s())) made.push_back(Value::from_string(std::string(c)));
  } else {
    fail(fmt::format("cannot loop over a {}", type_name(iterable)));
  }
  const Expr& target = *s.target;
  const auto bind = [&](Scope& into, const Value& item) {
    if (target.kind == Expr::Kind::Name) {
      into.set(target.name, item);
      return;
    }
    if (!item.is_list()) fail(fmt::format("cannot unpack a {} into {} loop variables", type_name(item), target.children.size()));
    if (item.items().size() != target.children.size())
      fail(fmt::format("cannot unpack {} values into {} loop variables", item.items().size(), target.children.size()));
    for (size_t j = 0; j < target.children.size(); ++j) into.set(target.children[j]->name, item.items()[j]);
  };
  std::vector<Value> kept;  // for x in xs if cond: the condition sees the loop variable
  if (s.condition) {
    for (const Value& item : *source) {
      charge(1);
      auto test_scope = std::make_shared<Scope>(loop_scope);
      bind(*test_scope, item);
      if (truthy(eval(*s.condition, test_scope))) kept.push_back(item);
    }
    source = &kept;
  } else {
    charge(static_cast<int64_t>(source->size()));
  }
  const std::vector<Value>& items = *source;
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    charge(1);
    set_loop(*loop_scope, items, i);
    bind(*loop_scope, items[static_cast<size_t>(i)]);
    if (exec(s.body, loop_scope, out) == Flow::Break) break;
  }
  // Jinja's for-else: the else block runs when there was nothing to loop over.
  if (items.empty()) return exec(s.orelse, loop_scope, out);
  return Flow::Normal;
}

namespace {

// Whether a macro body reads `kwargs` or `varargs` (then extra arguments are collected there instead of
// being an error).
bool reads_name(const Expr* e, std::string_view name) {
  if (!e) return false;
  if (e->kind == Expr::Kind::Name && e->name == name) return true;
  for (const auto& c : e->children)
    if (reads_name(c.get(), name)) return true;
  return false;
}
bool reads_name(const Body& body, std::string_view name) {
  for (const auto& s : body) {
    if (reads_name(s->expr.get(), name) || reads_name(s->condition.get(), name) || reads_name(s->body, name) ||
        reads_name(s->orelse, name))
      return true;
    for (const Param& p : s->params)
      if (reads_name(p.default_value.get(), name)) return true;
  }
  return false;
}

}  // namespace

void Interpreter::bind_parameters(const std::string& display, const std::vector<Param>& params, bool uses_kwargs,
                                  bool uses_varargs, Args& args, const ScopePtr& scope) {
  std::vector<std::pair<std::string, Value>> keyword = args.keyword;
  std::vector<const Param*> pending;
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& p = params[i];
    Value v;
    bool given = false;
    if (i < args.positional.size()) {
      v = args.positional[i];
      given = true;
    } else {
      for (auto it = keyword.begin(); it != keyword.end(); ++it)
        if (it->first == p.name) {
          v = it->second;
          keyword.erase(it);
          given = true;
          break;
        }
    }
    if (!given && p.default_value) pending.push_back(&p);
    scope->set(p.name, given ? v : Value::undefined());
  }
  if (uses_kwargs) {
    Dict d;
    for (auto& [k, v] : keyword) d.set(k, v);
    scope->set("kwargs", Value::from_dict(std::move(d)));
  } else if (!keyword.empty()) {
    fail(fmt::format("{} takes no keyword argument '{}'", display, keyword.front().first));
  }
  if (uses_varargs) {
    std::vector<Value> rest;
    for (size_t i = params.size(); i < args.positional.size(); ++i) rest.push_back(args.positional[i]);
    scope->set("varargs", Value::from_list(std::move(rest)));
  } else if (args.positional.size() > params.size()) {
    fail(fmt::format("{} takes at most {} argument(s), got {}", display, params.size(), args.positional.size()));
  }
  for (const Param* p : pending) scope->set(p->name, eval(*p->default_value, scope));
}

void Interpreter::define_macro(const Stmt& s, const ScopePtr& scope) {
  const bool kwargs = reads_name(s.body, "kwargs"), varargs = reads_name(s.body, "varargs");
  const std::string display = fmt::format("macro '{}'", s.text);
  const Stmt* macro = &s;
  scope->set(s.text, Value::from_function(display, [macro, kwargs, varargs, display](Interpreter& in, Args& args, const ScopePtr& caller) {
               if (++in.call_depth_ > in.limits_.max_nesting) {
                 --in.call_depth_;
                 fail(fmt::format("macro calls nested deeper than the limit of {}", in.limits_.max_nesting));
               }
               struct Leave {
                 int& depth;
                 ~Leave() { --depth; }
               } leave{in.call_depth_};
               auto local = std::make_shared<Scope>(caller);
               in.bind_parameters(display, macro->params, kwargs, varargs, args, local);
               return in.make_string(in.render_body(macro->body, local, display));
             }));
}

void Interpreter::exec_call_block(const Stmt& s, const ScopePtr& scope, std::string& out) {
  const bool kwargs = reads_name(s.body, "kwargs"), varargs = reads_name(s.body, "varargs");
  const Stmt* block = &s;
  ScopePtr defined_in = scope;
  Value caller = Value::from_function("caller", [block, kwargs, varargs, defined_in](Interpreter& in, Args& args, const ScopePtr&) {
    auto local = std::make_shared<Scope>(defined_in);
    in.bind_parameters("the call block's caller()", block->params, kwargs, varargs, args, local);
    return in.make_string(in.render_body(block->body, local, "a call block"));
  });
  Args args = eval_args(*s.expr, 1, scope);
  const Value function = eval(*s.expr->children[0], scope);
  auto call_scope = std::make_shared<Scope>(scope);
  call_scope->set("caller", std::move(caller));
  const Value v = call(function, args, call_scope);
  if (!v.is_none() && !v.is_undefined()) append(out, to_output(v));
}

Args Interpreter::eval_args(const Expr& e, size_t first, const ScopePtr& scope) {
  Args args;
  // As in Python, every positional argument is evaluated before any keyword argument.
  for (size_t i = first; i < e.children.size(); ++i) {
    const Expr& a = *e.children[i];
    if (a.kind == Expr::Kind::Spread) {
      const Value v = eval(*a.children[0], scope);
      if (!v.is_list()) fail(fmt::format("'*' needs a list, got a {}", type_name(v)));
      for (const Value& x : v.items()) args.positional.push_back(x);
    } else if (a.kind != Expr::Kind::Keyword && a.kind != Expr::Kind::KwSpread) {
      args.positional.push_back(eval(a, scope));
    }
  }
  const auto add = [&](const std::string& key, Value v) {
    for (const auto& [k, x] : args.keyword)
      if (k == key) fail(fmt::format("keyword argument '{}' is given twice", key));
    args.keyword.emplace_back(key, std::move(v));
  };
  for (size_t i = first; i < e.children.size(); ++i) {
    const Expr& a = *e.children[i];
    if (a.kind == Expr::Kind::Keyword) {
      add(a.name, eval(*a.children[0], scope));
    } else if (a.kind == Expr::Kind::KwSpread) {
      const Value v = eval(*a.children[0], scope);
      if (!v.is_dict()) fail(fmt::format("'**' needs a dict, got a {}", type_name(v)));
      for (const auto& [k, x] : v.dict->entries()) add(k, x);
    }
  }
  return args;
}

Value Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  try {
    return eval_inner(e, scope);
  } catch (const Failure& f) {
    throw Error(fmt::format("{}: {}", where(e.pos), f.message));
  }
}

Value Interpreter::eval_inner(const Expr& e, const ScopePtr& scope) {
  charge(1);
  switch (e.kind) {
    case Expr::Kind::Literal: return e.value;
    case Expr::Kind::Name: {
      const Value* v = scope->find(e.name);
      return v ? *v : Value::undefined();
    }
    case Expr::Kind::List:
    case Expr::Kind::Tuple: {
      std::vector<Value> items;
      items.reserve(e.children.size());
      for (const auto& c : e.children) items.push_back(eval(*c, scope));
      return Value::from_list(std::move(items), e.kind == Expr::Kind::Tuple);
    }
    case Expr::Kind::Dict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
        const Value key = eval(*e.children[i], scope);
        if (!key.is_string()) fail(fmt::format("dict keys must be strings, got a {}", type_name(key)));
        d.set(key.s(), eval(*e.children[i + 1], scope));
      }
      return Value::from_dict(std::move(d));
    }
    case Expr::Kind::Member: {
      const Value object = eval(*e.children[0], scope);
      return eval_member(object, eval(*e.children[1], scope));
    }
    case Expr::Kind::Slice: return eval_slice(e, scope);
    case Expr::Kind::Call: {
      Args args = eval_args(e, 1, scope);
      const Value function = eval(*e.children[0], scope);
      if (function.kind != Value::Kind::Function) {
        const Expr& callee = *e.children[0];
        if (callee.kind == Expr::Kind::Name) fail(fmt::format("'{}' is {}, not a function", callee.name, type_name(function)));
        fail(fmt::format("a {} cannot be called", type_name(function)));
      }
      return call(function, args, scope);
    }
    case Expr::Kind::Filter: {
      const Value operand = eval(*e.children[0], scope);
      Args args = eval_args(e, 1, scope);
      return apply_filter(*this, e.name, operand, args);
    }
    case Expr::Kind::Test: {
      const Value operand = eval(*e.children[0], scope);
      Args args = eval_args(e, 1, scope);
      return Value::from_bool(apply_test(*this, e.name, operand, args) != e.negate);
    }
    case Expr::Kind::Unary: {
      const Value v = eval(*e.children[0], scope);
      if (e.name == "not") return Value::from_bool(!truthy(v));
      const bool minus = e.name == "-";
      if (v.kind == Value::Kind::Float) return Value::from_float(minus ? -v.number : v.number);
      if (v.kind == Value::Kind::Int || v.kind == Value::Kind::Bool) {
        const int64_t x = v.kind == Value::Kind::Bool ? v.boolean : v.integer;
        if (minus && x == std::numeric_limits<int64_t>::min()) fail("integer overflow in unary '-'");
        return Value::from_int(minus ? -x : x);
      }
      fail(fmt::format("bad operand type for unary '{}': '{}'", e.name, type_name(v)));
    }
    case Expr::Kind::Binary: return eval_binary(e, scope);
    case Expr::Kind::Ternary:
      return truthy(eval(*e.children[0], scope)) ? eval(*e.children[1], scope) : eval(*e.children[2], scope);
    case Expr::Kind::Select: return truthy(eval(*e.children[1], scope)) ? eval(*e.children[0], scope) : Value::undefined();
    case Expr::Kind::Keyword:
    case Expr::Kind::Spread:
    case Expr::Kind::KwSpread: fail("'=', '*' and '**' arguments belong inside a call's parentheses");
  }
  return Value::undefined();
}

Value Interpreter::eval_member(const Value& object, const Value& key) {
  if (object.is_dict() || object.kind == Value::Kind::Namespace) {
    if (key.is_string()) {
      if (const Value* v = object.dict->find(key.s())) return *v;
      return object.is_dict() ? builtin_member(*this, object, key.s()) : Value::undefined();
    }
    return Value::undefined();
  }
  if ((object.is_list() || object.is_string()) && key.kind == Value::Kind::Int) {
    // Python's indexing: negative counts from the end; strings by code point.
    if (object.is_list()) {
      const int64_t n = static_cast<int64_t>(object.items().size());
      const int64_t i = key.integer < 0 ? key.integer + n : key.integer;
      return i >= 0 && i < n ? object.items()[static_cast<size_t>(i)] : Value::undefined();
    }
    const auto chars = code_points(object.s());
    const int64_t n = static_cast<int64_t>(chars.size());
    const int64_t i = key.integer < 0 ? key.integer + n : key.integer;
    return i >= 0 && i < n ? Value::from_string(std::string(chars[static_cast<size_t>(i)])) : Value::undefined();
  }
  if (key.is_string()) return builtin_member(*this, object, key.s());
  return Value::undefined();
}

namespace {

// Python's slice indices for a sequence of n items: the positions start, start+step, ... before stop.
std::vector<size_t> slice_positions(int64_t n, const Value& start_v, const Value& stop_v, const Value& step_v) {
  const auto given = [](const Value& v) { return !v.is_undefined() && !v.is_none(); };
  for (const Value* v : {&start_v, &stop_v, &step_v})
    if (given(*v) && v->kind != Value::Kind::Int) fail(fmt::format("slice indices must be integers or none, got a {}", type_name(*v)));
  const int64_t step = given(step_v) ? step_v.integer : 1;
  if (step == 0) fail("slice step cannot be zero");
  int64_t start, stop;
  if (step > 0) {
    start = !given(start_v) ? 0 : start_v.integer < 0 ? std::max<int64_t>(n + start_v.integer, 0) : std::min(start_v.integer, n);
    stop = !given(stop_v) ? n : stop_v.integer < 0 ? std::max<int64_t>(n + stop_v.integer, 0) : std::min(stop_v.integer, n);
  } else {
    start = !given(start_v) ? n - 1 : start_v.integer < 0 ? std::max<int64_t>(n + start_v.integer, -1) : std::min(start_v.integer, n - 1);
    stop = !given(stop_v) ? -1 : stop_v.integer < 0 ? std::max<int64_t>(n + stop_v.integer, -1) : std::min(stop_v.integer, n - 1);
  }
  std::vector<size_t> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    out.push_back(static_cast<size_t>(i));
    if (__builtin_add_overflow(i, step, &i)) break;
  }
  return out;
}

}  // namespace

Value Interpreter::eval_slice(const Expr& e, const ScopePtr& scope) {
  const Value object = eval(*e.children[0], scope);
  Value parts[3];
  for (int k = 0; k < 3; ++k)
    if (e.children[static_cast<size_t>(k) + 1]) parts[k] = eval(*e.children[static_cast<size_t>(k) + 1], scope);
  if (object.is_list()) {
    const auto at = slice_positions(static_cast<int64_t>(object.items().size()), parts[0], parts[1], parts[2]);
    charge(static_cast<int64_t>(at.size()));
    std::vector<Value> out;
    out.reserve(at.size());
    for (size_t i : at) out.push_back(object.items()[i]);
    return Value::from_list(std::move(out));
  }
  if (object.is_string()) {
    const auto chars = code_points(object.s());
    const auto at = slice_positions(static_cast<int64_t>(chars.size()), parts[0], parts[1], parts[2]);
    std::string out;
    for (size_t i : at) out += chars[i];
    return make_string(std::move(out));
  }
  fail(fmt::format("only lists and strings can be sliced, not a {}", type_name(object)));
}

namespace {

bool checked(bool overflow, const char* op) {
  if (overflow) fail(fmt::format("integer overflow in '{}'", op));
  return true;
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  const bool floats = a.kind == Value::Kind::Float || b.kind == Value::Kind::Float;
  const double x = a.as_double(), y = b.as_double();
  if (op == "/") {
    if (y == 0) fail("division by zero");
    return Value::from_float(x / y);
  }
  if (op == "//" || op == "%") {
    if (y == 0) fail(op == "//" ? "integer division by zero" : "modulo by zero");
    if (floats) {
      const double q = std::floor(x / y);
      return Value::from_float(op == "//" ? q : x - q * y);
    }
    if (a.integer == std::numeric_limits<int64_t>::min() && b.integer == -1) fail(fmt::format("integer overflow in '{}'", op));
    int64_t q = a.integer / b.integer, r = a.integer % b.integer;
    if (r != 0 && ((r < 0) != (b.integer < 0))) {  // Python floors toward minus infinity
      --q;
      r += b.integer;
    }
    return Value::from_int(op == "//" ? q : r);
  }
  if (op == "+" || op == "-" || op == "*") {
    if (floats) return Value::from_float(op == "+" ? x + y : op == "-" ? x - y : x * y);
    int64_t r = 0;
    if (op == "+") checked(__builtin_add_overflow(a.integer, b.integer, &r), "+");
    else if (op == "-") checked(__builtin_sub_overflow(a.integer, b.integer, &r), "-");
    else checked(__builtin_mul_overflow(a.integer, b.integer, &r), "*");
    return Value::from_int(r);
  }
  if (op == "<") return Value::from_bool(x < y);
  if (op == ">") return Value::from_bool(x > y);
  if (op == "<=") return Value::from_bool(x <= y);
  if (op == ">=") return Value::from_bool(x >= y);
  return Value::undefined();
}

Value power(const Value& a, const Value& b) {
  const double x = a.as_double(), y = b.as_double();
  if (x == 0 && y < 0) fail("0 cannot be raised to a negative power");
  const bool floats = a.kind == Value::Kind::Float || b.kind == Value::Kind::Float || y < 0;
  if (!floats) {
    int64_t base = a.kind == Value::Kind::Bool ? a.boolean : a.integer, e = b.kind == Value::Kind::Bool ? b.boolean : b.integer;
    int64_t r = 1;
    for (; e > 0; e >>= 1) {  // by squaring: 63 rounds at most, whatever the exponent
      if ((e & 1) && __builtin_mul_overflow(r, base, &r)) fail("integer overflow in '**'");
      if (e > 1 && __builtin_mul_overflow(base, base, &base)) fail("integer overflow in '**'");
    }
    return Value::from_int(r);
  }
  const double r = std::pow(x, y);
  if (!std::isfinite(r)) fail("'**' gives no finite real number");
  return Value::from_float(r);
}

}  // namespace

Value Interpreter::eval_binary(const Expr& e, const ScopePtr& scope) {
  const std::string& op = e.name;
  const Value a = eval(*e.children[0], scope);
  if (op == "and") return truthy(a) ? eval(*e.children[1], scope) : a;
  if (op == "or") return truthy(a) ? a : eval(*e.children[1], scope);
  const Value b = eval(*e.children[1], scope);
  if (op == "==") return Value::from_bool(equal(a, b));
  if (op == "!=") return Value::from_bool(!equal(a, b));
  const bool membership = op == "in" || op == "not in";
  if (a.is_undefined() || b.is_undefined()) {
    if (membership && b.is_undefined()) return Value::from_bool(op == "not in");  // nothing is in undefined
    fail(fmt::format("cannot apply '{}' to an undefined value", op));
  }
  if (a.is_none() || b.is_none()) fail(fmt::format("cannot apply '{}' to none", op));
  const auto numeric = [](const Value& v) { return v.kind == Value::Kind::Int || v.kind == Value::Kind::Float; };
  if (op == "~") return make_string(concat_text(a) + concat_text(b));
  if (op == "**" && (numeric(a) || a.kind == Value::Kind::Bool) && (numeric(b) || b.kind == Value::Kind::Bool)) return power(a, b);
  if (numeric(a) && numeric(b)) {
    Value r = arithmetic(op, a, b);
    if (!r.is_undefined()) return r;
  }
  if (membership) {
    bool found = false;
    if (b.is_list()) {
      for (const Value& x : b.items())
        if (equal(a, x)) found = true;
    } else if (b.is_string() && a.is_string()) {
      found = b.s().find(a.s()) != std::string::npos;
    } else if (b.is_dict() && a.is_string()) {
      found = b.dict->find(a.s()) != nullptr;
    } else {
      fail(fmt::format("cannot apply '{}' to '{}' and '{}'", op, type_name(a), type_name(b)));
    }
    return Value::from_bool(found != (op == "not in"));
  }
  if (op == "+" && a.is_list() && b.is_list()) {
    check_size(a.items().size() + b.items().size());
    charge(static_cast<int64_t>(a.items().size() + b.items().size()));
    std::vector<Value> out = a.items();
    out.insert(out.end(), b.items().begin(), b.items().end());
    return Value::from_list(std::move(out));
  }
  if (op == "+" && (a.is_string() || b.is_string())) {
    check_size(concat_text(a).size() + concat_text(b).size());
    return make_string(concat_text(a) + concat_text(b));
  }
  if (op == "*" && (a.is_string() || a.is_list()) && b.kind == Value::Kind::Int) {  // Python's repetition
    const int64_t times = std::max<int64_t>(b.integer, 0);
    const size_t unit = a.is_string() ? a.s().size() : a.items().size();
    if (unit == 0) return a.is_string() ? Value::from_string("") : Value::from_list({});
    if (unit > 0 && static_cast<uint64_t>(times) > limits_.max_output / unit) check_size(limits_.max_output + 1);
    charge(static_cast<int64_t>(unit) * times / 64);
    if (a.is_string()) {
      std::string out;
      for (int64_t i = 0; i < times; ++i) out += a.s();
      return make_string(std::move(out));
    }
    std::vector<Value> out;
    for (int64_t i = 0; i < times; ++i) out.insert(out.end(), a.items().begin(), a.items().end());
    return Value::from_list(std::move(out));
  }
  if (a.is_string() && b.is_string() && (op == "<" || op == ">" || op == "<=" || op == ">=")) {
    const int c = a.s().compare(b.s());
    return Value::from_bool(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
  }
  fail(fmt::format("unsupported operand types for '{}': '{}' and '{}'", op, type_name(a), type_name(b)));
}

}  // namespace attend::tokenize::jinja
