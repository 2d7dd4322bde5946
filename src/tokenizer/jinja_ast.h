// Jinja AST: expressions and statements as the parser builds them and the interpreter walks them.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace lithe::jinja {

struct Expr;
struct Node;
using ExprPtr = std::unique_ptr<Expr>;
using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

// Filters and tests are resolved at parse time (an unknown one is an error before rendering).
using FilterFn = Result<Value> (*)(Interpreter&, const Value& input, CallArgs& args, SrcPos pos);
using TestFn = Result<bool> (*)(Interpreter&, const Value& input, CallArgs& args, SrcPos pos);

enum class ExprKind : uint8_t {
  literal,  // value
  name,     // name
  list,     // args: items
  tuple,    // args: items
  dict,     // args: key0, value0, key1, value1, ...
  getattr,  // args[0].name
  getitem,  // args[0][args[1]]
  slice,    // args[0][args[1]:args[2]:args[3]], absent parts are null
  call,     // args[0](args[1:], kwargs)
  filter,   // args[0] | name(args[1:], kwargs); filter_fn
  test,     // args[0] is [not] name(args[1:], kwargs); test_fn, negated
  not_,     // not args[0]
  neg,      // -args[0]
  pos,      // +args[0]
  binary,   // args[0] op args[1]
  concat,   // args[0] ~ args[1] ~ ...
  compare,  // args[0] cmp_ops[0] args[1] cmp_ops[1] args[2] ...
  and_,     // args[0] and args[1]
  or_,      // args[0] or args[1]
  cond,     // args[1] if args[0] else args[2] (args[2] may be null)
};

enum class BinOp : uint8_t { add, sub, mul, div, floordiv, mod, pow };
enum class CmpOp : uint8_t { eq, ne, lt, le, gt, ge, in, not_in };

struct Expr {
  ExprKind kind = ExprKind::literal;
  SrcPos pos;
  std::string name;
  Value value;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<CmpOp> cmp_ops;
  BinOp op = BinOp::add;
  bool negated = false;
  FilterFn filter_fn = nullptr;
  TestFn test_fn = nullptr;
};

enum class NodeKind : uint8_t {
  text,       // text
  output,     // {{ expr }}
  if_,        // branches: (cond, body)...; a null cond is the else branch
  for_,       // for targets in expr [if cond]: body [else: else_body]
  set,        // set targets = expr
  set_attr,   // set targets[0].text = expr (namespace attribute)
  set_block,  // set targets[0] %} body {% endset
  macro,      // macro text(params) body
  break_,
  continue_,
  generation,  // HF's {% generation %} body {% endgeneration %}: renders body as is
};

struct Node {
  NodeKind kind = NodeKind::text;
  SrcPos pos;
  std::string text;
  std::vector<std::string> targets;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::pair<ExprPtr, NodeList>> branches;
  NodeList body;
  NodeList else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters, default may be null
};

}  // namespace lithe::jinja
