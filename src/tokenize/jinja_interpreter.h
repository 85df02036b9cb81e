// Renders a parsed template: scopes, statements, expressions, and the limits that keep any template from
// running away. The built-in filters, tests, methods and globals live in jinja_builtins.cpp.
//
// Scoping follows @huggingface/jinja: {% if %} shares its scope; {% for %} opens one scope for all its
// turns (a {% set %} in the body is gone after the loop; namespaces carry values out); a macro runs in a
// scope opened on its caller's.
#pragma once

#include "tokenize/jinja_ast.h"

#include <cstdint>
#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

namespace attend::tokenize::jinja {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;

  explicit Scope(std::shared_ptr<Scope> p = nullptr) : parent(std::move(p)) {}
  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
  void set(const std::string& name, Value v) { vars[name] = std::move(v); }
};
using ScopePtr = std::shared_ptr<Scope>;

struct Limits {
  int max_nesting = 128;             // nesting of the source (parse) and of macro calls (render)
  int64_t max_steps = 20'000'000;    // expressions and statements run, loop turns, 64-byte units of text made
  size_t max_output = 16u << 20;     // bytes of the output, and of any one string or list made on the way
};

class Interpreter {
 public:
  Interpreter(std::string_view source, std::string_view origin, const Limits& limits, std::time_t now)
      : source_(source), origin_(origin), limits_(limits), now_(now) {}

  // Renders `program` with `globals` as the outermost scope.
  std::string render(const Body& program, const ScopePtr& globals);

  // For the built-ins.
  void charge(int64_t steps);             // counts work against max_steps
  void check_size(size_t n) const;        // a string or list of n bytes or items may be made
  Value make_string(std::string s);       // checked and charged
  Value call(const Value& function, Args& args, const ScopePtr& scope);
  // Keeps a namespace made during the render, to empty it when the render ends: a namespace can hold
  // itself (ns.me = ns) or a caller() whose scope holds it, and emptying breaks such cycles.
  void track(const std::shared_ptr<Dict>& ns) { namespaces_.push_back(ns); }
  ~Interpreter();
  std::time_t now() const { return now_; }
  std::string_view origin() const { return origin_; }
  // Where a byte offset of the source is, for messages: "chat_template:3:14".
  std::string where(uint32_t pos) const;

 private:
  enum class Flow { Normal, Break, Continue };

  Flow exec(const Body& body, const ScopePtr& scope, std::string& out);
  Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out);
  Flow exec_for(const Stmt& s, const ScopePtr& scope, std::string& out);
  void set_loop(Scope& scope, const std::vector<Value>& items, int64_t i);
  void exec_set(const Stmt& s, const ScopePtr& scope, Value rhs);
  void define_macro(const Stmt& s, const ScopePtr& scope);
  void exec_call_block(const Stmt& s, const ScopePtr& scope, std::string& out);
  std::string render_body(const Body& body, const ScopePtr& scope, std::string_view what);
  void bind_parameters(const std::string& display, const std::vector<Param>& params, bool uses_kwargs,
                       bool uses_varargs, Args& args, const ScopePtr& scope);
  void append(std::string& out, std::string_view text);

  Value eval(const Expr& e, const ScopePtr& scope);
  Value eval_inner(const Expr& e, const ScopePtr& scope);
  Value eval_binary(const Expr& e, const ScopePtr& scope);
  Value eval_member(const Value& object, const Value& key);
  Value eval_slice(const Expr& e, const ScopePtr& scope);
  Args eval_args(const Expr& e, size_t first, const ScopePtr& scope);

  std::string_view source_, origin_;
  Limits limits_;
  std::time_t now_;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  std::vector<std::shared_ptr<Dict>> namespaces_;
};

}  // namespace attend::tokenize::jinja
