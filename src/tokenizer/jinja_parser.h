// Jinja parser: tokens -> AST, following jinja2's grammar and operator precedence
// (condexpr < or < and < not < compare < + - < ~ < * / // % < ** < unary < postfix/filters).
// Unsupported tags, filters and tests fail here, before anything renders, with
// StatusCode::unsupported naming the construct; malformed templates fail with invalid_argument
// naming the line and column.
#pragma once

#include <string_view>
#include <vector>

#include "lithe/core/status.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_lexer.h"

namespace lithe::jinja {

// max_depth bounds the nesting of blocks and expressions (the parser and interpreter recurse).
Result<NodeList> parse(const std::vector<Token>& tokens, int max_depth);

// Registries, in jinja_filters.cpp: nullptr when the name is not supported.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

Status unsupported(std::string_view construct, SrcPos pos);

}  // namespace lithe::jinja
