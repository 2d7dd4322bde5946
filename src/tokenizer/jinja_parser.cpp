#include "tokenizer/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

namespace lithe::jinja {

Status unsupported(std::string_view construct, SrcPos pos) {
  return error(StatusCode::unsupported, "chat template uses unsupported Jinja construct '{}' at line {}", construct,
               pos.line);
}

namespace {

// Tags jinja2 knows that lithe does not run (HF's environment enables only loopcontrols).
constexpr std::string_view kUnsupportedTags[] = {"extends",    "block", "include", "import", "from",  "with",
                                                 "autoescape", "call",  "filter",  "do",     "trans", "pluralize"};

class Parser {
 public:
  Parser(const std::vector<Token>& toks, int max_depth) : t_(toks), max_depth_(max_depth) {}

  Result<NodeList> run() {
    std::string end;
    LITHE_ASSIGN(NodeList body, subparse({}, &end));
    return body;
  }

 private:
  // ---- token helpers ----
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool is_op(std::string_view op) const { return cur().kind == Tok::op && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().kind == Tok::name && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }

  Status fail(const std::string& msg) const { return fail_at(cur().pos, msg); }
  Status fail_at(SrcPos p, const std::string& msg) const {
    return error(StatusCode::invalid_argument, "chat template syntax error at line {}, column {}: {}", p.line, p.col,
                 msg);
  }
  Status expect_op(std::string_view op) {
    if (skip_op(op)) return Status::ok();
    return fail(fmt::format("expected '{}', got {}", op, describe(cur())));
  }
  Status expect_block_end() {
    if (cur().kind == Tok::block_end) {
      advance();
      return Status::ok();
    }
    return fail(fmt::format("expected end of statement block, got {}", describe(cur())));
  }
  Result<std::string> expect_name() {
    if (cur().kind != Tok::name) return fail(fmt::format("expected a name, got {}", describe(cur())));
    std::string n = cur().text;
    advance();
    return n;
  }

  // Depth guard: hostile templates must not overflow the C++ stack.
  struct DepthGuard {
    explicit DepthGuard(int& d) : d_(d) { ++d_; }
    ~DepthGuard() { --d_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
    int& d_;
  };
  // Left-nested chains (a.b.c, a + b + c, x|f|g) deepen the AST without recursing here: extra
  // counts the links seen so far, so that evaluating the tree stays within the limit too.
  Status check_depth(int extra = 0) const {
    if (depth_ + extra <= max_depth_) return Status::ok();
    return error(StatusCode::invalid_argument,
                 "chat template nests blocks or expressions deeper than the limit of {} at line {}, column {}",
                 max_depth_, cur().pos.line, cur().pos.col);
  }

  // ---- statements ----

  // Parses until a block tag whose name is in ends; consumes "{% name" and stores name in *end.
  Result<NodeList> subparse(std::initializer_list<std::string_view> ends, std::string* end) {
    DepthGuard g(depth_);
    LITHE_TRY(check_depth());
    NodeList body;
    while (cur().kind != Tok::eof) {
      const Token& tok = cur();
      if (tok.kind == Tok::text) {
        auto n = std::make_unique<Node>();
        n->kind = NodeKind::text;
        n->pos = tok.pos;
        n->text = tok.text;
        body.push_back(std::move(n));
        advance();
      } else if (tok.kind == Tok::var_begin) {
        auto n = std::make_unique<Node>();
        n->kind = NodeKind::output;
        n->pos = tok.pos;
        advance();
        LITHE_ASSIGN(n->expr, parse_tuple(true, {}));
        if (cur().kind != Tok::var_end) {
          return fail(fmt::format("expected end of print statement, got {}", describe(cur())));
        }
        advance();
        body.push_back(std::move(n));
      } else if (tok.kind == Tok::block_begin) {
        advance();
        if (cur().kind == Tok::name && std::find(ends.begin(), ends.end(), cur().text) != ends.end()) {
          *end = cur().text;
          advance();
          return body;
        }
        LITHE_ASSIGN(NodePtr n, parse_statement(ends));
        if (n) body.push_back(std::move(n));
      } else {
        return fail(fmt::format("unexpected {}", describe(tok)));
      }
    }
    if (ends.size() > 0) {
      std::string want;
      for (std::string_view e : ends) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
      return fail(fmt::format("unexpected end of template, expected {}", want));
    }
    return body;
  }

  Result<NodePtr> parse_statement(std::initializer_list<std::string_view> ends) {
    if (cur().kind != Tok::name) return fail(fmt::format("expected a tag name, got {}", describe(cur())));
    const std::string tag = cur().text;
    const SrcPos pos = cur().pos;
    if (tag == "for") return parse_for();
    if (tag == "if") return parse_if();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "generation") return parse_generation();
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) return fail(fmt::format("'{}' outside a for loop", tag));
      advance();
      LITHE_TRY(expect_block_end());
      auto n = std::make_unique<Node>();
      n->kind = tag == "break" ? NodeKind::break_ : NodeKind::continue_;
      n->pos = pos;
      return n;
    }
    for (std::string_view u : kUnsupportedTags) {
      if (tag == u) return unsupported(fmt::format("{{% {} %}}", tag), pos);
    }
    if (ends.size() > 0) {
      std::string want;
      for (std::string_view e : ends) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
      return fail(fmt::format("unexpected tag '{}', expected {}", tag, want));
    }
    return fail(fmt::format("unknown tag '{}'", tag));
  }

  // Assignment targets: name[, name...] (optionally parenthesized) or, with namespaces, ns.attr.
  Status parse_targets(Node& n, bool with_namespace) {
    const bool paren = skip_op("(");
    while (true) {
      LITHE_ASSIGN(std::string name, expect_name());
      if (name == "true" || name == "false" || name == "none" || name == "True" || name == "False" || name == "None") {
        return fail(fmt::format("cannot assign to '{}'", name));
      }
      if (with_namespace && n.targets.empty() && is_op(".")) {
        advance();
        LITHE_ASSIGN(n.text, expect_name());
        n.targets.push_back(name);
        n.kind = NodeKind::set_attr;
        break;
      }
      n.targets.push_back(name);
      if (!skip_op(",")) break;
      if (is_name("in") || is_op("=") || cur().kind == Tok::block_end || is_op(")")) break;
    }
    if (paren) LITHE_TRY(expect_op(")"));
    return Status::ok();
  }

  Result<NodePtr> parse_for() {
    auto n = std::make_unique<Node>();
    n->kind = NodeKind::for_;
    n->pos = cur().pos;
    advance();
    LITHE_TRY(parse_targets(*n, false));
    if (!skip_name("in")) return fail(fmt::format("expected 'in', got {}", describe(cur())));
    LITHE_ASSIGN(n->expr, parse_tuple(false, {"recursive"}));
    if (skip_name("if")) {
      LITHE_ASSIGN(n->cond, parse_expression(true));
    }
    if (is_name("recursive")) return unsupported("recursive for loop", cur().pos);
    LITHE_TRY(expect_block_end());
    ++loop_depth_;
    std::string end;
    auto body = subparse({"endfor", "else"}, &end);
    --loop_depth_;
    if (!body.is_ok()) return body.status();
    n->body = std::move(body).value();
    LITHE_TRY(expect_block_end());
    if (end == "else") {
      LITHE_ASSIGN(n->else_body, subparse({"endfor"}, &end));
      LITHE_TRY(expect_block_end());
    }
    return n;
  }

  Result<NodePtr> parse_if() {
    auto n = std::make_unique<Node>();
    n->kind = NodeKind::if_;
    n->pos = cur().pos;
    advance();
    while (true) {
      LITHE_ASSIGN(ExprPtr cond, parse_tuple(false, {}));
      LITHE_TRY(expect_block_end());
      std::string end;
      LITHE_ASSIGN(NodeList body, subparse({"elif", "else", "endif"}, &end));
      n->branches.emplace_back(std::move(cond), std::move(body));
      if (end == "elif") continue;
      LITHE_TRY(expect_block_end());
      if (end == "else") {
        LITHE_ASSIGN(NodeList else_body, subparse({"endif"}, &end));
        LITHE_TRY(expect_block_end());
        n->branches.emplace_back(nullptr, std::move(else_body));
      }
      return n;
    }
  }

  Result<NodePtr> parse_set() {
    auto n = std::make_unique<Node>();
    n->kind = NodeKind::set;
    n->pos = cur().pos;
    advance();
    LITHE_TRY(parse_targets(*n, true));
    if (skip_op("=")) {
      LITHE_ASSIGN(n->expr, parse_tuple(true, {}));
      LITHE_TRY(expect_block_end());
      return n;
    }
    if (is_op("|")) return unsupported("filtered {% set %} block", cur().pos);
    if (n->kind == NodeKind::set_attr || n->targets.size() != 1) {
      return fail("a {% set %} block assigns to a single name");
    }
    LITHE_TRY(expect_block_end());
    n->kind = NodeKind::set_block;
    std::string end;
    LITHE_ASSIGN(n->body, subparse({"endset"}, &end));
    LITHE_TRY(expect_block_end());
    return n;
  }

  Result<NodePtr> parse_macro() {
    auto n = std::make_unique<Node>();
    n->kind = NodeKind::macro;
    n->pos = cur().pos;
    advance();
    LITHE_ASSIGN(n->text, expect_name());
    LITHE_TRY(expect_op("("));
    while (!is_op(")")) {
      if (!n->params.empty()) LITHE_TRY(expect_op(","));
      if (is_op(")")) break;
      LITHE_ASSIGN(std::string p, expect_name());
      ExprPtr def;
      if (skip_op("=")) {
        LITHE_ASSIGN(def, parse_expression(true));
      } else if (!n->params.empty() && n->params.back().second) {
        return fail("non-default macro parameter follows a default one");
      }
      n->params.emplace_back(std::move(p), std::move(def));
    }
    advance();
    LITHE_TRY(expect_block_end());
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    std::string end;
    auto body = subparse({"endmacro"}, &end);
    loop_depth_ = saved_loops;
    if (!body.is_ok()) return body.status();
    n->body = std::move(body).value();
    LITHE_TRY(expect_block_end());
    return n;
  }

  Result<NodePtr> parse_generation() {
    auto n = std::make_unique<Node>();
    n->kind = NodeKind::generation;
    n->pos = cur().pos;
    advance();
    LITHE_TRY(expect_block_end());
    std::string end;
    LITHE_ASSIGN(n->body, subparse({"endgeneration"}, &end));
    LITHE_TRY(expect_block_end());
    return n;
  }

  // ---- expressions ----

  static ExprPtr make(ExprKind k, SrcPos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->pos = pos;
    return e;
  }

  bool is_tuple_end(std::initializer_list<std::string_view> extra) const {
    if (cur().kind == Tok::var_end || cur().kind == Tok::block_end || cur().kind == Tok::eof || is_op(")")) {
      return true;
    }
    return cur().kind == Tok::name && std::find(extra.begin(), extra.end(), cur().text) != extra.end();
  }

  Result<ExprPtr> parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra,
                              bool explicit_parens = false) {
    const SrcPos pos = cur().pos;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) LITHE_TRY(expect_op(","));
      if (is_tuple_end(extra)) break;
      LITHE_ASSIGN(ExprPtr e, parse_expression(with_condexpr));
      items.push_back(std::move(e));
      if (!is_op(",")) break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) return fail(fmt::format("expected an expression, got {}", describe(cur())));
    }
    ExprPtr t = make(ExprKind::tuple, pos);
    t->args = std::move(items);
    return t;
  }

  Result<ExprPtr> parse_expression(bool with_condexpr) {
    DepthGuard g(depth_);
    LITHE_TRY(check_depth());
    if (!with_condexpr) return parse_or();
    const SrcPos pos = cur().pos;
    LITHE_ASSIGN(ExprPtr expr, parse_or());
    for (int links = 1; skip_name("if"); ++links) {
      LITHE_TRY(check_depth(links));
      ExprPtr c = make(ExprKind::cond, pos);
      LITHE_ASSIGN(ExprPtr test, parse_or());
      ExprPtr other;
      if (skip_name("else")) {
        LITHE_ASSIGN(other, parse_expression(true));
      }
      c->args.push_back(std::move(test));
      c->args.push_back(std::move(expr));
      c->args.push_back(std::move(other));
      expr = std::move(c);
    }
    return expr;
  }

  Result<ExprPtr> parse_logic(bool is_or) {
    const SrcPos pos = cur().pos;
    auto sub = [&]() { return is_or ? parse_logic(false) : parse_not(); };
    LITHE_ASSIGN(ExprPtr left, sub());
    for (int links = 1; skip_name(is_or ? "or" : "and"); ++links) {
      LITHE_TRY(check_depth(links));
      LITHE_ASSIGN(ExprPtr right, sub());
      ExprPtr e = make(is_or ? ExprKind::or_ : ExprKind::and_, pos);
      e->args.push_back(std::move(left));
      e->args.push_back(std::move(right));
      left = std::move(e);
    }
    return left;
  }
  Result<ExprPtr> parse_or() { return parse_logic(true); }

  Result<ExprPtr> parse_not() {
    if (is_name("not")) {
      DepthGuard g(depth_);
      LITHE_TRY(check_depth());
      ExprPtr e = make(ExprKind::not_, cur().pos);
      advance();
      LITHE_ASSIGN(ExprPtr inner, parse_not());
      e->args.push_back(std::move(inner));
      return e;
    }
    return parse_compare();
  }

  Result<ExprPtr> parse_compare() {
    const SrcPos pos = cur().pos;
    LITHE_ASSIGN(ExprPtr first, parse_math1());
    ExprPtr cmp;
    while (true) {
      CmpOp op;
      if (cur().kind == Tok::op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                    cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        const std::string& s = cur().text;
        op = s == "=="   ? CmpOp::eq
             : s == "!=" ? CmpOp::ne
             : s == "<"  ? CmpOp::lt
             : s == "<=" ? CmpOp::le
             : s == ">"  ? CmpOp::gt
                         : CmpOp::ge;
        advance();
      } else if (is_name("in")) {
        op = CmpOp::in;
        advance();
      } else if (is_name("not") && peek().kind == Tok::name && peek().text == "in") {
        op = CmpOp::not_in;
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprKind::compare, pos);
        cmp->args.push_back(std::move(first));
      }
      LITHE_ASSIGN(ExprPtr rhs, parse_math1());
      cmp->cmp_ops.push_back(op);
      cmp->args.push_back(std::move(rhs));
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  Result<ExprPtr> binary(ExprPtr left, BinOp op, ExprPtr right, SrcPos pos) {
    ExprPtr e = make(ExprKind::binary, pos);
    e->op = op;
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return e;
  }

  Result<ExprPtr> parse_math1() {
    const SrcPos pos = cur().pos;
    LITHE_ASSIGN(ExprPtr left, parse_concat());
    for (int links = 1; is_op("+") || is_op("-"); ++links) {
      LITHE_TRY(check_depth(links));
      const BinOp op = is_op("+") ? BinOp::add : BinOp::sub;
      advance();
      LITHE_ASSIGN(ExprPtr right, parse_concat());
      LITHE_ASSIGN(left, binary(std::move(left), op, std::move(right), pos));
    }
    return left;
  }

  Result<ExprPtr> parse_concat() {
    const SrcPos pos = cur().pos;
    LITHE_ASSIGN(ExprPtr first, parse_math2());
    if (!is_op("~")) return first;
    ExprPtr e = make(ExprKind::concat, pos);
    e->args.push_back(std::move(first));
    while (skip_op("~")) {
      LITHE_ASSIGN(ExprPtr next, parse_math2());
      e->args.push_back(std::move(next));
    }
    return e;
  }

  Result<ExprPtr> parse_math2() {
    const SrcPos pos = cur().pos;
    LITHE_ASSIGN(ExprPtr left, parse_pow());
    for (int links = 1; is_op("*") || is_op("/") || is_op("//") || is_op("%"); ++links) {
      LITHE_TRY(check_depth(links));
      const std::string s = cur().text;
      const BinOp op = s == "*" ? BinOp::mul : s == "/" ? BinOp::div : s == "//" ? BinOp::floordiv : BinOp::mod;
      advance();
      LITHE_ASSIGN(ExprPtr right, parse_pow());
      LITHE_ASSIGN(left, binary(std::move(left), op, std::move(right), pos));
    }
    return left;
  }

  Result<ExprPtr> parse_pow() {
    const SrcPos pos = cur().pos;
    LITHE_ASSIGN(ExprPtr left, parse_unary(true));
    for (int links = 1; skip_op("**"); ++links) {
      LITHE_TRY(check_depth(links));
      LITHE_ASSIGN(ExprPtr right, parse_unary(true));
      LITHE_ASSIGN(left, binary(std::move(left), BinOp::pow, std::move(right), pos));
    }
    return left;
  }

  Result<ExprPtr> parse_unary(bool with_filter) {
    DepthGuard g(depth_);
    LITHE_TRY(check_depth());
    const SrcPos pos = cur().pos;
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      node = make(is_op("-") ? ExprKind::neg : ExprKind::pos, pos);
      advance();
      LITHE_ASSIGN(ExprPtr inner, parse_unary(false));
      node->args.push_back(std::move(inner));
    } else {
      LITHE_ASSIGN(node, parse_primary());
    }
    LITHE_ASSIGN(node, parse_postfix(std::move(node)));
    if (with_filter) {
      LITHE_ASSIGN(node, parse_filter_expr(std::move(node)));
    }
    return node;
  }

  Result<ExprPtr> parse_primary() {
    const Token& tok = cur();
    const SrcPos pos = tok.pos;
    if (tok.kind == Tok::name) {
      ExprPtr e = make(ExprKind::literal, pos);
      const std::string& s = tok.text;
      if (s == "true" || s == "True" || s == "false" || s == "False") {
        e->value = Value::boolean(s == "true" || s == "True");
      } else if (s == "none" || s == "None") {
        e->value = Value::none();
      } else {
        e->kind = ExprKind::name;
        e->name = s;
      }
      advance();
      return e;
    }
    if (tok.kind == Tok::string) {
      std::string s;
      while (cur().kind == Tok::string) {  // adjacent literals concatenate
        s += cur().text;
        advance();
      }
      ExprPtr e = make(ExprKind::literal, pos);
      e->value = Value::string(std::move(s));
      return e;
    }
    if (tok.kind == Tok::integer || tok.kind == Tok::floating) {
      ExprPtr e = make(ExprKind::literal, pos);
      e->value = tok.kind == Tok::integer ? Value::integer(tok.ival) : Value::floating(tok.fval);
      advance();
      return e;
    }
    if (is_op("(")) {
      advance();
      LITHE_ASSIGN(ExprPtr e, parse_tuple(true, {}, true));
      LITHE_TRY(expect_op(")"));
      return e;
    }
    if (is_op("[") || is_op("{")) {
      const bool is_list = is_op("[");
      const std::string_view close = is_list ? "]" : "}";
      ExprPtr e = make(is_list ? ExprKind::list : ExprKind::dict, pos);
      advance();
      while (!is_op(close)) {
        if (!e->args.empty()) LITHE_TRY(expect_op(","));
        if (is_op(close)) break;
        LITHE_ASSIGN(ExprPtr item, parse_expression(true));
        e->args.push_back(std::move(item));
        if (!is_list) {
          LITHE_TRY(expect_op(":"));
          LITHE_ASSIGN(ExprPtr value, parse_expression(true));
          e->args.push_back(std::move(value));
        }
      }
      advance();
      return e;
    }
    return fail(fmt::format("unexpected {}", describe(tok)));
  }

  Result<ExprPtr> parse_postfix(ExprPtr node) {
    for (int links = 1;; ++links) {
      LITHE_TRY(check_depth(links));
      if (is_op(".")) {
        const SrcPos pos = cur().pos;
        advance();
        if (cur().kind == Tok::name) {
          ExprPtr e = make(ExprKind::getattr, pos);
          e->name = cur().text;
          e->args.push_back(std::move(node));
          node = std::move(e);
        } else if (cur().kind == Tok::integer) {
          ExprPtr e = make(ExprKind::getitem, pos);
          ExprPtr idx = make(ExprKind::literal, cur().pos);
          idx->value = Value::integer(cur().ival);
          e->args.push_back(std::move(node));
          e->args.push_back(std::move(idx));
          node = std::move(e);
        } else {
          return fail(fmt::format("expected a name or number after '.', got {}", describe(cur())));
        }
        advance();
      } else if (is_op("[")) {
        LITHE_ASSIGN(node, parse_subscript(std::move(node)));
      } else if (is_op("(")) {
        LITHE_ASSIGN(node, parse_call(std::move(node)));
      } else {
        return node;
      }
    }
  }

  Result<ExprPtr> parse_subscript(ExprPtr node) {
    const SrcPos pos = cur().pos;
    advance();                   // [
    std::vector<ExprPtr> parts;  // start, stop, step
    bool is_slice = false;
    int colons = 0;
    parts.emplace_back();
    while (!is_op("]")) {
      if (is_op(",")) return unsupported("multi-dimensional subscript", cur().pos);
      if (skip_op(":")) {
        if (++colons > 2) return fail("too many ':' in a slice");
        is_slice = true;
        parts.emplace_back();
        continue;
      }
      if (parts.back()) return fail(fmt::format("expected ':' or ']', got {}", describe(cur())));
      LITHE_ASSIGN(parts.back(), parse_expression(true));
    }
    advance();
    if (!is_slice && !parts[0]) return fail_at(pos, "expected a subscript expression");
    ExprPtr e = make(is_slice ? ExprKind::slice : ExprKind::getitem, pos);
    e->args.push_back(std::move(node));
    if (!is_slice) {
      e->args.push_back(std::move(parts[0]));
      return e;
    }
    parts.resize(3);
    for (auto& p : parts) e->args.push_back(std::move(p));
    return e;
  }

  // ( args, name=value ... ) into e->args (after whatever is there) and e->kwargs.
  Status parse_call_args(Expr& e) {
    LITHE_TRY(expect_op("("));
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        LITHE_TRY(expect_op(","));
        if (is_op(")")) break;
      }
      first = false;
      if (is_op("*") || is_op("**")) return unsupported("*args / **kwargs in a call", cur().pos);
      if (cur().kind == Tok::name && peek().kind == Tok::op && peek().text == "=") {
        std::string key = cur().text;
        advance();
        advance();
        LITHE_ASSIGN(ExprPtr v, parse_expression(true));
        e.kwargs.emplace_back(std::move(key), std::move(v));
      } else {
        if (!e.kwargs.empty()) return fail("positional argument follows keyword argument");
        LITHE_ASSIGN(ExprPtr v, parse_expression(true));
        e.args.push_back(std::move(v));
      }
    }
    advance();
    return Status::ok();
  }

  Result<ExprPtr> parse_call(ExprPtr node) {
    ExprPtr e = make(ExprKind::call, cur().pos);
    e->args.push_back(std::move(node));
    LITHE_TRY(parse_call_args(*e));
    return e;
  }

  Result<std::string> dotted_name() {
    LITHE_ASSIGN(std::string name, expect_name());
    while (skip_op(".")) {
      LITHE_ASSIGN(std::string part, expect_name());
      name += "." + part;
    }
    return name;
  }

  Result<ExprPtr> parse_filter_expr(ExprPtr node) {
    for (int links = 1;; ++links) {
      LITHE_TRY(check_depth(links));
      if (is_op("|")) {
        advance();
        const SrcPos pos = cur().pos;
        ExprPtr e = make(ExprKind::filter, pos);
        LITHE_ASSIGN(e->name, dotted_name());
        e->filter_fn = find_filter(e->name);
        if (e->filter_fn == nullptr) return unsupported(fmt::format("filter '{}'", e->name), pos);
        e->args.push_back(std::move(node));
        if (is_op("(")) LITHE_TRY(parse_call_args(*e));
        node = std::move(e);
      } else if (is_name("is")) {
        const SrcPos pos = cur().pos;
        advance();
        ExprPtr e = make(ExprKind::test, pos);
        e->negated = skip_name("not");
        LITHE_ASSIGN(e->name, dotted_name());
        e->test_fn = find_test(e->name);
        if (e->test_fn == nullptr) return unsupported(fmt::format("test '{}'", e->name), pos);
        e->args.push_back(std::move(node));
        if (is_op("(")) {
          LITHE_TRY(parse_call_args(*e));
        } else if ((cur().kind == Tok::name || cur().kind == Tok::string || cur().kind == Tok::integer ||
                    cur().kind == Tok::floating || is_op("(") || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) return fail("cannot chain multiple tests with 'is'");
          LITHE_ASSIGN(ExprPtr arg, parse_primary());
          LITHE_ASSIGN(arg, parse_postfix(std::move(arg)));
          e->args.push_back(std::move(arg));
        }
        node = std::move(e);
      } else if (is_op("(")) {
        LITHE_ASSIGN(node, parse_call(std::move(node)));
      } else {
        return node;
      }
    }
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int depth_ = 0;
  int max_depth_;
  int loop_depth_ = 0;
};

}  // namespace

Result<NodeList> parse(const std::vector<Token>& tokens, int max_depth) { return Parser(tokens, max_depth).run(); }

}  // namespace lithe::jinja
