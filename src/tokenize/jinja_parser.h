// Tokens to a syntax tree, with Jinja's statements and the operator precedence of @huggingface/jinja:
//   a if c else b  <  or  <  and  <  not  <  in, not in, ==, !=, <, >, <=, >=  <  + - ~  <  * / // %
//   <  ** (left-associative, as in Jinja)  <  is tests  <  | filters  <  unary - +  <  calls, .attr, [index]
#pragma once

#include "tokenize/jinja_ast.h"
#include "tokenize/jinja_lexer.h"

#include <string_view>
#include <vector>

namespace attend::tokenize::jinja {

// Parses a whole template. Throws attend::Error "<origin>:<line>:<column>: expected ..., found ..." on
// a syntax error, and when statements or expressions nest deeper than max_depth.
Body parse(const std::vector<Token>& tokens, std::string_view source, std::string_view origin, int max_depth);

}  // namespace attend::tokenize::jinja
