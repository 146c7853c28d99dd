//! Splits IDL source into tokens. Comments (`/* */`, `//`) and whitespace are dropped; problems
//! (unterminated comments or strings, stray characters, oversized numbers) become diagnostics
//! and lexing goes on, so one run reports every error in the file.

use crate::diagnostic::{Diagnostic, Span};

#[derive(Debug, Clone, PartialEq)]
pub enum TokenKind {
    Ident(String),
    Integer(i64),
    Float(f64),
    Str(String),
    LParen,
    RParen,
    LBracket,
    RBracket,
    Semicolon,
    Comma,
    PathSep,
    Colon,
    Question,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Caret,
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
    EqualEqual,
    NotEqual,
    Eof,
}

impl TokenKind {
    /// How the token reads in an error message.
    pub fn describe(&self) -> String {
        match self {
            TokenKind::Ident(name) => format!("`{name}`"),
            TokenKind::Integer(v) => format!("number `{v}`"),
            TokenKind::Float(v) => format!("number `{v:?}`"),
            TokenKind::Str(s) => format!("string {s:?}"),
            TokenKind::Eof => "end of file".to_string(),
            other => format!("`{}`", other.symbol()),
        }
    }

    fn symbol(&self) -> &'static str {
        match self {
            TokenKind::LParen => "(",
            TokenKind::RParen => ")",
            TokenKind::LBracket => "[",
            TokenKind::RBracket => "]",
            TokenKind::Semicolon => ";",
            TokenKind::Comma => ",",
            TokenKind::PathSep => "::",
            TokenKind::Colon => ":",
            TokenKind::Question => "?",
            TokenKind::Plus => "+",
            TokenKind::Minus => "-",
            TokenKind::Star => "*",
            TokenKind::Slash => "/",
            TokenKind::Percent => "%",
            TokenKind::Caret => "^",
            TokenKind::Less => "<",
            TokenKind::LessEqual => "<=",
            TokenKind::Greater => ">",
            TokenKind::GreaterEqual => ">=",
            TokenKind::EqualEqual => "==",
            TokenKind::NotEqual => "!=",
            _ => "?",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    pub kind: TokenKind,
    pub span: Span,
}

/// Tokenizes the whole text; the last token is always `Eof`.
pub fn lex(text: &str) -> (Vec<Token>, Vec<Diagnostic>) {
    let mut lexer = Lexer {
        text,
        bytes: text.as_bytes(),
        pos: 0,
        tokens: Vec::new(),
        diagnostics: Vec::new(),
    };
    lexer.run();
    (lexer.tokens, lexer.diagnostics)
}

struct Lexer<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    tokens: Vec<Token>,
    diagnostics: Vec<Diagnostic>,
}

impl Lexer<'_> {
    fn peek(&self, ahead: usize) -> Option<u8> {
        self.bytes.get(self.pos + ahead).copied()
    }

    fn push(&mut self, kind: TokenKind, start: usize) {
        self.tokens.push(Token {
            kind,
            span: Span::new(start, self.pos),
        });
    }

    fn error(&mut self, start: usize, end: usize, message: impl Into<String>) {
        self.diagnostics
            .push(Diagnostic::new(Span::new(start, end), message));
    }

    fn run(&mut self) {
        while let Some(c) = self.peek(0) {
            let start = self.pos;
            match c {
                b' ' | b'\t' | b'\r' | b'\n' | 0x0c => self.pos += 1,
                b'/' if self.peek(1) == Some(b'/') => {
                    while self.peek(0).is_some_and(|c| c != b'\n') {
                        self.pos += 1;
                    }
                }
                b'/' if self.peek(1) == Some(b'*') => self.block_comment(),
                b'"' => self.string(),
                b'0'..=b'9' => self.number(),
                b'.' if self.peek(1).is_some_and(|c| c.is_ascii_digit()) => self.number(),
                c if c == b'_' || c.is_ascii_alphabetic() => {
                    while self
                        .peek(0)
                        .is_some_and(|c| c == b'_' || c.is_ascii_alphanumeric())
                    {
                        self.pos += 1;
                    }
                    let word = self.text[start..self.pos].to_string();
                    self.push(TokenKind::Ident(word), start);
                }
                _ => self.punctuation(c),
            }
        }
        let end = self.text.len();
        self.tokens.push(Token {
            kind: TokenKind::Eof,
            span: Span::new(end, end),
        });
    }

    fn block_comment(&mut self) {
        let start = self.pos;
        self.pos += 2;
        loop {
            match self.peek(0) {
                None => {
                    self.error(
                        start,
                        start + 2,
                        "unterminated comment: `/*` has no closing `*/`",
                    );
                    return;
                }
                Some(b'*') if self.peek(1) == Some(b'/') => {
                    self.pos += 2;
                    return;
                }
                Some(_) => self.pos += 1,
            }
        }
    }

    fn string(&mut self) {
        let start = self.pos;
        self.pos += 1;
        let mut value = String::new();
        loop {
            let Some(c) = self.text[self.pos..].chars().next() else {
                self.error(
                    start,
                    start + 1,
                    "unterminated string: missing closing `\"`",
                );
                return;
            };
            match c {
                '"' => {
                    self.pos += 1;
                    self.push(TokenKind::Str(value), start);
                    return;
                }
                '\n' => {
                    self.error(
                        start,
                        start + 1,
                        "unterminated string: missing closing `\"` before the end of the line",
                    );
                    return;
                }
                '\\' => {
                    let escape_start = self.pos;
                    self.pos += 1;
                    let Some(escaped) = self.text[self.pos..].chars().next() else {
                        continue;
                    };
                    self.pos += escaped.len_utf8();
                    match escaped {
                        '"' => value.push('"'),
                        '\\' => value.push('\\'),
                        'n' => value.push('\n'),
                        't' => value.push('\t'),
                        '\n' => {
                            self.error(
                                start,
                                start + 1,
                                "unterminated string: missing closing `\"` before the end of the line",
                            );
                            return;
                        }
                        other => self.error(
                            escape_start,
                            self.pos,
                            format!(
                                "unknown escape `\\{other}` in string (use \\\" \\\\ \\n or \\t)"
                            ),
                        ),
                    }
                }
                c => {
                    value.push(c);
                    self.pos += c.len_utf8();
                }
            }
        }
    }

    fn number(&mut self) {
        let start = self.pos;
        let mut is_float = false;
        while self.peek(0).is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        if self.peek(0) == Some(b'.') && self.peek(1).is_some_and(|c| c.is_ascii_digit()) {
            is_float = true;
            self.pos += 1;
            while self.peek(0).is_some_and(|c| c.is_ascii_digit()) {
                self.pos += 1;
            }
        }
        if matches!(self.peek(0), Some(b'e' | b'E')) {
            let sign = usize::from(matches!(self.peek(1), Some(b'+' | b'-')));
            if self.peek(1 + sign).is_some_and(|c| c.is_ascii_digit()) {
                is_float = true;
                self.pos += 1 + sign;
                while self.peek(0).is_some_and(|c| c.is_ascii_digit()) {
                    self.pos += 1;
                }
            }
        }
        // A number glued to letters (`3n`) is a typo, not two tokens.
        if self
            .peek(0)
            .is_some_and(|c| c == b'_' || c.is_ascii_alphabetic())
        {
            while self
                .peek(0)
                .is_some_and(|c| c == b'_' || c.is_ascii_alphanumeric())
            {
                self.pos += 1;
            }
            let text = &self.text[start..self.pos];
            self.error(
                start,
                self.pos,
                format!("malformed number `{text}` (write `3 * n`, not `3n`)"),
            );
            return;
        }
        let text = &self.text[start..self.pos];
        if is_float {
            match text.parse::<f64>() {
                Ok(v) if v.is_finite() => self.push(TokenKind::Float(v), start),
                _ => self.error(start, self.pos, format!("number `{text}` is out of range")),
            }
        } else {
            match text.parse::<i64>() {
                Ok(v) => self.push(TokenKind::Integer(v), start),
                Err(_) => self.error(
                    start,
                    self.pos,
                    format!("integer `{text}` does not fit in 64 bits"),
                ),
            }
        }
    }

    fn punctuation(&mut self, c: u8) {
        let start = self.pos;
        let two = self.peek(1);
        let (kind, len) = match (c, two) {
            (b':', Some(b':')) => (TokenKind::PathSep, 2),
            (b'<', Some(b'=')) => (TokenKind::LessEqual, 2),
            (b'>', Some(b'=')) => (TokenKind::GreaterEqual, 2),
            (b'=', Some(b'=')) => (TokenKind::EqualEqual, 2),
            (b'!', Some(b'=')) => (TokenKind::NotEqual, 2),
            (b'(', _) => (TokenKind::LParen, 1),
            (b')', _) => (TokenKind::RParen, 1),
            (b'[', _) => (TokenKind::LBracket, 1),
            (b']', _) => (TokenKind::RBracket, 1),
            (b';', _) => (TokenKind::Semicolon, 1),
            (b',', _) => (TokenKind::Comma, 1),
            (b':', _) => (TokenKind::Colon, 1),
            (b'?', _) => (TokenKind::Question, 1),
            (b'+', _) => (TokenKind::Plus, 1),
            (b'-', _) => (TokenKind::Minus, 1),
            (b'*', _) => (TokenKind::Star, 1),
            (b'/', _) => (TokenKind::Slash, 1),
            (b'%', _) => (TokenKind::Percent, 1),
            (b'^', _) => (TokenKind::Caret, 1),
            (b'<', _) => (TokenKind::Less, 1),
            (b'>', _) => (TokenKind::Greater, 1),
            _ => {
                let ch = self.text[start..].chars().next().unwrap_or('?');
                self.pos += ch.len_utf8();
                let message = if ch == '=' {
                    "unexpected `=` (comparison is `==`)".to_string()
                } else {
                    format!("unexpected character `{}`", ch.escape_default())
                };
                self.error(start, self.pos, message);
                return;
            }
        };
        self.pos += len;
        self.push(kind, start);
    }
}
