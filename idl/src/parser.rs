//! Recursive-descent parser from tokens to the syntax tree. It recovers after an error (at
//! the next parameter, clause or definition) so that one run reports every problem; a
//! definition with a syntax error is left out of the tree.

use crate::ast::{
    BinaryOp, Calls, Clause, Define, ElementType, Expr, ExprKind, Ident, IdlFile, Item, Mode,
    Param, StringLit,
};
use crate::diagnostic::{Diagnostic, Span};
use crate::lexer::{Token, TokenKind, lex};

const TOP_LEVEL_KEYWORDS: [&str; 4] = ["Module", "Library", "Required", "Define"];
const CLAUSE_KEYWORDS: [&str; 6] = [
    "Required",
    "Backend",
    "CalcOrder",
    "Parallel",
    "Threads",
    "Calls",
];

/// Deeper nesting than this is refused, so hostile input cannot overflow the stack.
const MAX_EXPRESSION_DEPTH: usize = 64;

/// Parses a whole file. The tree holds every item that parsed; the diagnostics list the rest.
pub fn parse(text: &str) -> (IdlFile, Vec<Diagnostic>) {
    let (tokens, diagnostics) = lex(text);
    let mut parser = Parser {
        tokens,
        pos: 0,
        diagnostics,
        depth: 0,
    };
    let file = parser.file();
    let mut diagnostics = parser.diagnostics;
    diagnostics.sort_by_key(|d| d.span.start);
    (file, diagnostics)
}

/// Parses one expression that must fill the whole text (used for descriptors received over
/// the network and for command-line values).
pub fn parse_expression(text: &str) -> Result<Expr, Vec<Diagnostic>> {
    let (tokens, diagnostics) = lex(text);
    let mut parser = Parser {
        tokens,
        pos: 0,
        diagnostics,
        depth: 0,
    };
    let expr = parser.expression();
    if let Ok(_) = &expr
        && parser.peek() != &TokenKind::Eof
    {
        let span = parser.span();
        let found = parser.peek().describe();
        parser.diagnostics.push(Diagnostic::new(
            span,
            format!("unexpected {found} after the expression"),
        ));
    }
    match expr {
        Ok(e) if parser.diagnostics.is_empty() => Ok(e),
        _ => Err(parser.diagnostics),
    }
}

/// Whether `text` is a valid IDL identifier.
pub fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// The closest word in `candidates` to a misspelled `word`, if it is close enough to be a
/// likely typo.
pub fn suggest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    // One- and two-letter names are close to everything; a guess there is noise.
    if word.len() < 3 {
        return None;
    }
    let lower = word.to_ascii_lowercase();
    let mut candidates: Vec<&str> = candidates.into_iter().collect();
    candidates.sort_unstable();
    candidates
        .into_iter()
        .map(|c| (edit_distance(&lower, &c.to_ascii_lowercase()), c))
        .filter(|&(d, c)| d <= (c.len() / 3).max(1))
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// Edit distance counting an adjacent transposition (`flaot`) as one edit.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

fn did_you_mean(suggestion: Option<&str>) -> String {
    suggestion.map_or(String::new(), |s| format!("; did you mean `{s}`?"))
}

/// An error already recorded as a diagnostic; the caller recovers.
struct Reported;

type Parsed<T> = Result<T, Reported>;

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    diagnostics: Vec<Diagnostic>,
    depth: usize,
}

fn keyword_is(word: &str, keyword: &str) -> bool {
    word.eq_ignore_ascii_case(keyword)
}

impl Parser {
    fn peek(&self) -> &TokenKind {
        &self.tokens[self.pos.min(self.tokens.len() - 1)].kind
    }

    fn span(&self) -> Span {
        self.tokens[self.pos.min(self.tokens.len() - 1)].span
    }

    fn previous_span(&self) -> Span {
        self.tokens[self.pos.saturating_sub(1)].span
    }

    fn advance(&mut self) -> Token {
        let token = self.tokens[self.pos.min(self.tokens.len() - 1)].clone();
        if self.pos < self.tokens.len() - 1 {
            self.pos += 1;
        }
        token
    }

    fn error<T>(&mut self, span: Span, message: impl Into<String>) -> Parsed<T> {
        self.diagnostics.push(Diagnostic::new(span, message));
        Err(Reported)
    }

    fn expected<T>(&mut self, what: &str) -> Parsed<T> {
        let found = self.peek().describe();
        let span = self.span();
        self.error(span, format!("expected {what}, found {found}"))
    }

    fn expect(&mut self, kind: TokenKind, what: &str) -> Parsed<Span> {
        if *self.peek() == kind {
            Ok(self.advance().span)
        } else {
            self.expected(what)
        }
    }

    fn ident(&mut self, what: &str) -> Parsed<Ident> {
        if let TokenKind::Ident(name) = self.peek() {
            let name = name.clone();
            let span = self.advance().span;
            Ok(Ident { name, span })
        } else {
            self.expected(what)
        }
    }

    fn string(&mut self, what: &str) -> Parsed<StringLit> {
        if let TokenKind::Str(value) = self.peek() {
            let value = value.clone();
            let span = self.advance().span;
            Ok(StringLit { value, span })
        } else {
            self.expected(what)
        }
    }

    /// Skips to just after the next `;`, or to the next top-level keyword, whichever is first.
    fn recover_item(&mut self) {
        loop {
            match self.peek() {
                TokenKind::Eof => return,
                TokenKind::Semicolon => {
                    self.advance();
                    return;
                }
                TokenKind::Ident(w)
                    if keyword_is(w, "Define")
                        || keyword_is(w, "Module")
                        || keyword_is(w, "Library") =>
                {
                    return;
                }
                _ => {
                    self.advance();
                }
            }
        }
    }

    fn file(&mut self) -> IdlFile {
        let mut file = IdlFile::default();
        while *self.peek() != TokenKind::Eof {
            let start = self.pos;
            match self.item() {
                Ok(item) => file.items.push(item),
                Err(Reported) => {
                    self.recover_item();
                    if self.pos == start {
                        self.advance();
                    }
                }
            }
        }
        file
    }

    fn item(&mut self) -> Parsed<Item> {
        let word = match self.peek() {
            TokenKind::Ident(word) => word.clone(),
            _ => return self.expected("`Module`, `Library`, `Required` or `Define`"),
        };
        let span = self.span();
        if keyword_is(&word, "Module") {
            self.advance();
            let name = self.ident("a module name")?;
            self.expect(TokenKind::Semicolon, "`;` after the module name")?;
            Ok(Item::Module(name))
        } else if keyword_is(&word, "Library") {
            self.advance();
            let s = self.string("a string of linker flags after `Library`")?;
            self.expect(TokenKind::Semicolon, "`;` after `Library \"...\"`")?;
            Ok(Item::Library(s))
        } else if keyword_is(&word, "Required") {
            self.advance();
            let s = self.string("a string naming an object file after `Required`")?;
            self.expect(TokenKind::Semicolon, "`;` after `Required \"...\"`")?;
            Ok(Item::Required(s))
        } else if keyword_is(&word, "Define") {
            self.advance();
            self.define(span).map(|d| Item::Define(Box::new(d)))
        } else {
            let hint = did_you_mean(suggest(&word, TOP_LEVEL_KEYWORDS));
            let hint = if hint.is_empty() {
                " (expected `Module`, `Library`, `Required` or `Define`)".to_string()
            } else {
                hint
            };
            self.error(span, format!("unknown keyword `{word}`{hint}"))
        }
    }

    fn define(&mut self, start: Span) -> Parsed<Define> {
        let name = self.ident("a function name after `Define`")?;
        self.expect(TokenKind::LParen, "`(` after the function name")?;
        let params = self.params()?;
        let description = if let TokenKind::Str(_) = self.peek() {
            Some(self.string("a description")?)
        } else {
            None
        };
        let mut clauses = Vec::new();
        let calls = loop {
            let word = match self.peek() {
                TokenKind::Ident(word) => word.clone(),
                _ => {
                    return self.expected(
                        "`Required`, `Backend`, `CalcOrder`, `Parallel`, `Threads` or `Calls` after the parameters",
                    );
                }
            };
            let span = self.span();
            if keyword_is(&word, "Calls") {
                self.advance();
                break self.calls(span)?;
            }
            self.advance();
            let clause = if keyword_is(&word, "Required") {
                Clause::Required(self.string("a string naming an object file after `Required`")?)
            } else if keyword_is(&word, "Backend") {
                Clause::Backend(self.string("a string such as \"MPI\" after `Backend`")?)
            } else if keyword_is(&word, "CalcOrder") {
                Clause::CalcOrder(self.expression()?)
            } else if keyword_is(&word, "Parallel") {
                Clause::Parallel(self.expression()?)
            } else if keyword_is(&word, "Threads") {
                Clause::Threads(span)
            } else {
                let hint = did_you_mean(suggest(&word, CLAUSE_KEYWORDS));
                let hint = if hint.is_empty() {
                    " (expected `Required`, `Backend`, `CalcOrder`, `Parallel`, `Threads` or `Calls`)"
                        .to_string()
                } else {
                    hint
                };
                return self.error(span, format!("unknown keyword `{word}`{hint}"));
            };
            clauses.push(clause);
        };
        let span = start.to(self.previous_span());
        Ok(Define {
            name,
            params,
            description,
            clauses,
            calls,
            span,
        })
    }

    /// Parameters after the `(` up to and including the `)`. A bad parameter is reported and
    /// skipped so that later ones are still checked; the definition then fails as a whole.
    fn params(&mut self) -> Parsed<Vec<Param>> {
        let mut params = Vec::new();
        let mut failed = false;
        if *self.peek() == TokenKind::RParen {
            self.advance();
            return Ok(params);
        }
        loop {
            match self.param() {
                Ok(p) => params.push(p),
                Err(Reported) => {
                    failed = true;
                    self.recover_param()?;
                }
            }
            match self.peek() {
                TokenKind::Comma => {
                    self.advance();
                }
                TokenKind::RParen => {
                    self.advance();
                    break;
                }
                _ => {
                    self.expected::<()>("`,` or `)` after a parameter")?;
                }
            }
        }
        if failed { Err(Reported) } else { Ok(params) }
    }

    /// Skips to the `,` or `)` that ends the current parameter.
    fn recover_param(&mut self) -> Parsed<()> {
        let mut depth = 0usize;
        loop {
            match self.peek() {
                TokenKind::Eof | TokenKind::Semicolon => return Err(Reported),
                TokenKind::LParen | TokenKind::LBracket => depth += 1,
                TokenKind::RBracket => depth = depth.saturating_sub(1),
                TokenKind::RParen if depth > 0 => depth -= 1,
                TokenKind::RParen | TokenKind::Comma if depth == 0 => return Ok(()),
                TokenKind::Ident(w) if keyword_is(w, "Define") => return Err(Reported),
                _ => {}
            }
            self.advance();
        }
    }

    fn param(&mut self) -> Parsed<Param> {
        let start = self.span();
        let mode = self.mode()?;
        let element_type = self.element_type()?;
        let name = self.ident("a parameter name")?;
        let mut dims = Vec::new();
        while *self.peek() == TokenKind::LBracket {
            self.advance();
            dims.push(self.expression()?);
            self.expect(TokenKind::RBracket, "`]` after the dimension")?;
        }
        Ok(Param {
            mode,
            element_type,
            name,
            dims,
            span: start.to(self.previous_span()),
        })
    }

    fn mode(&mut self) -> Parsed<Mode> {
        let span = self.span();
        let TokenKind::Ident(word) = self.peek().clone() else {
            return self.expected("a parameter mode (`IN`, `OUT`, `INOUT` or `WORK`)");
        };
        // Ninf-1 spelled the modes `mode_in`, `mode_out`, ...; both are accepted.
        let bare = word
            .strip_prefix("mode_")
            .or_else(|| word.strip_prefix("MODE_"))
            .unwrap_or(&word);
        if let Some(mode) = Mode::ALL
            .into_iter()
            .find(|m| keyword_is(bare, m.keyword()))
        {
            self.advance();
            return Ok(mode);
        }
        if ElementType::from_keyword(&word).is_some() {
            return self.error(
                span,
                format!("missing mode before `{word}`: expected `IN`, `OUT`, `INOUT` or `WORK`"),
            );
        }
        let hint = did_you_mean(suggest(bare, Mode::ALL.map(Mode::keyword)));
        let hint = if hint.is_empty() {
            " (expected `IN`, `OUT`, `INOUT` or `WORK`)".to_string()
        } else {
            hint
        };
        self.error(span, format!("unknown mode `{word}`{hint}"))
    }

    fn element_type(&mut self) -> Parsed<ElementType> {
        let span = self.span();
        let TokenKind::Ident(word) = self.peek().clone() else {
            return self.expected("a type such as `int` or `double`");
        };
        if let Some(t) = ElementType::from_keyword(&word) {
            self.advance();
            return Ok(t);
        }
        let hint = did_you_mean(suggest(&word, ElementType::ALL.map(ElementType::keyword)));
        let hint = if hint.is_empty() {
            " (expected char, short, int, long, float, double, scomplex, dcomplex, string or filename)"
                .to_string()
        } else {
            hint
        };
        self.error(span, format!("unknown type `{word}`{hint}"))
    }

    fn calls(&mut self, start: Span) -> Parsed<Calls> {
        let language = self.string("a language string (\"C\" or \"Rust\") after `Calls`")?;
        let mut path = vec![self.ident("the name of the routine to call")?];
        while *self.peek() == TokenKind::PathSep {
            self.advance();
            path.push(self.ident("a path segment after `::`")?);
        }
        self.expect(TokenKind::LParen, "`(` after the routine name")?;
        let mut args = Vec::new();
        if *self.peek() != TokenKind::RParen {
            loop {
                match self.peek() {
                    TokenKind::Ident(_) => args.push(self.ident("a parameter name")?),
                    _ => return self.expected("a parameter name as a `Calls` argument"),
                }
                match self.peek() {
                    TokenKind::Comma => {
                        self.advance();
                    }
                    TokenKind::RParen => break,
                    _ => return self.expected("`,` or `)` in the `Calls` arguments"),
                }
            }
        }
        self.advance();
        self.expect(TokenKind::Semicolon, "`;` after the `Calls` clause")?;
        Ok(Calls {
            language,
            path,
            args,
            span: start.to(self.previous_span()),
        })
    }

    // Expressions, from loosest to tightest binding.

    fn expression(&mut self) -> Parsed<Expr> {
        self.depth += 1;
        let result = if self.depth > MAX_EXPRESSION_DEPTH {
            let span = self.span();
            self.error(
                span,
                format!("expression nested more than {MAX_EXPRESSION_DEPTH} levels deep"),
            )
        } else {
            self.conditional()
        };
        self.depth -= 1;
        result
    }

    fn conditional(&mut self) -> Parsed<Expr> {
        let condition = self.binary(2)?;
        if *self.peek() != TokenKind::Question {
            return Ok(condition);
        }
        self.advance();
        let then = self.expression()?;
        self.expect(TokenKind::Colon, "`:` in `condition ? a : b`")?;
        let otherwise = self.nested(Self::conditional)?;
        let span = condition.span.to(otherwise.span);
        Ok(Expr::new(
            ExprKind::Conditional(Box::new(condition), Box::new(then), Box::new(otherwise)),
            span,
        ))
    }

    /// Runs `f` one nesting level deeper, refusing input nested beyond the limit.
    fn nested(&mut self, f: fn(&mut Self) -> Parsed<Expr>) -> Parsed<Expr> {
        self.depth += 1;
        let result = if self.depth > MAX_EXPRESSION_DEPTH {
            let span = self.span();
            self.error(
                span,
                format!("expression nested more than {MAX_EXPRESSION_DEPTH} levels deep"),
            )
        } else {
            f(self)
        };
        self.depth -= 1;
        result
    }

    fn binary_operator(&self, precedence: u8) -> Option<BinaryOp> {
        let op = match self.peek() {
            TokenKind::EqualEqual => BinaryOp::Equal,
            TokenKind::NotEqual => BinaryOp::NotEqual,
            TokenKind::Less => BinaryOp::Less,
            TokenKind::LessEqual => BinaryOp::LessEqual,
            TokenKind::Greater => BinaryOp::Greater,
            TokenKind::GreaterEqual => BinaryOp::GreaterEqual,
            TokenKind::Plus => BinaryOp::Add,
            TokenKind::Minus => BinaryOp::Sub,
            TokenKind::Star => BinaryOp::Mul,
            TokenKind::Slash => BinaryOp::Div,
            TokenKind::Percent => BinaryOp::Rem,
            _ => return None,
        };
        (op.precedence() == precedence).then_some(op)
    }

    /// Left-associative binary operators of one precedence level (2 to 5).
    fn binary(&mut self, precedence: u8) -> Parsed<Expr> {
        let operand = |p: &mut Self| {
            if precedence < 5 {
                p.binary(precedence + 1)
            } else {
                p.nested(Self::unary)
            }
        };
        let mut left = operand(self)?;
        let mut chain = 0;
        while let Some(op) = self.binary_operator(precedence) {
            // A long chain `a + b + c + ...` nests to the left; bound it like parentheses.
            chain += 1;
            if self.depth + chain > MAX_EXPRESSION_DEPTH * 4 {
                let span = self.span();
                return self.error(span, "expression too long: split it or simplify it");
            }
            self.advance();
            let right = operand(self)?;
            let span = left.span.to(right.span);
            left = Expr::new(ExprKind::Binary(op, Box::new(left), Box::new(right)), span);
        }
        Ok(left)
    }

    fn unary(&mut self) -> Parsed<Expr> {
        if *self.peek() == TokenKind::Minus {
            let start = self.advance().span;
            let operand = self.nested(Self::unary)?;
            let span = start.to(operand.span);
            return Ok(Expr::new(ExprKind::Negate(Box::new(operand)), span));
        }
        self.power()
    }

    fn power(&mut self) -> Parsed<Expr> {
        let base = self.primary()?;
        if *self.peek() != TokenKind::Caret {
            return Ok(base);
        }
        self.advance();
        let exponent = self.nested(Self::unary)?;
        let span = base.span.to(exponent.span);
        Ok(Expr::new(
            ExprKind::Binary(BinaryOp::Pow, Box::new(base), Box::new(exponent)),
            span,
        ))
    }

    fn primary(&mut self) -> Parsed<Expr> {
        let span = self.span();
        match self.peek().clone() {
            TokenKind::Integer(v) => {
                self.advance();
                Ok(Expr::new(ExprKind::Integer(v), span))
            }
            TokenKind::Float(v) => {
                self.advance();
                Ok(Expr::new(ExprKind::Float(v), span))
            }
            TokenKind::Ident(name) => {
                self.advance();
                Ok(Expr::new(ExprKind::Name(name), span))
            }
            TokenKind::LParen => {
                self.advance();
                let inner = self.expression()?;
                self.expect(TokenKind::RParen, "`)` to close the parenthesis")?;
                Ok(inner)
            }
            _ => self.expected("an expression"),
        }
    }
}
