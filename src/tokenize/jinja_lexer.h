// The template's text cut into tokens, after the whitespace rules Hugging Face renders with.
//
// transformers renders chat templates with trim_blocks=True and lstrip_blocks=True, and @huggingface/jinja
// applies both as rewrites of the source before lexing; so does this lexer, in the same order:
//   1. a single trailing newline of the template is dropped (Jinja's keep_trailing_newline=False);
//   2. lstrip_blocks: spaces and tabs from a line's start up to "{%", "{#" or "{-" are dropped;
//   3. trim_blocks: a newline right after "%}", "#}" or "-}" is dropped;
//   4. transformers' {% generation %} / {% endgeneration %} markers are removed, with the white space around
//      them unless the tag has "-" on that side.
// Then "{%-", "{{-" and "{#-" drop the white space before the tag and "-%}", "-}}", "-#}" the white space
// after it. Every token keeps its byte offset in the original template, so errors name line and column.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attend::tokenize::jinja {

enum class Tok {
  Text,            // template text between tags
  Number,          // 12, 1.5, and a negative literal the lexer joined with its sign (-1)
  String,          // 'text' or "text", escapes resolved
  Name,            // identifiers and keywords alike (in, not, and, if, true, ...)
  Equals,          // =
  LParen, RParen, LBracket, RBracket, LBrace, RBrace,
  Comma, Dot, Colon, Pipe,
  Additive,        // + - ~
  Multiplicative,  // * / // %
  Power,           // **
  Comparison,      // == != < > <= >=
  Unary,           // a sign the lexer saw in a unary place (- x)
  OpenStatement, CloseStatement, OpenExpression, CloseExpression,
  Comment,
};

struct Token {
  Tok type;
  std::string value;
  uint32_t pos;  // byte offset in the original template
};

// "line 3, column 14" of a byte offset (columns count code points, from 1).
struct Location {
  int line = 1, column = 1;
};
Location locate(std::string_view source, uint32_t offset);

// Tokens of a template; throws attend::Error "<origin>:<line>:<column>: ..." on text it cannot lex
// (an unclosed string or comment, a character that starts no token, a bad escape).
std::vector<Token> tokenize(std::string_view source, std::string_view origin);

// Readable name of a token for messages: "'%}'", "name 'endif'", "end of the template".
std::string describe(const Token* t);

}  // namespace attend::tokenize::jinja
