//! The syntax tree of an IDL file, exactly as written (before checking), and its
//! pretty-printer. Printing a tree and parsing the text again gives the same tree.

use std::fmt::{self, Write};

use serde::{Deserialize, Serialize};

use crate::diagnostic::Span;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StringLit {
    pub value: String,
    pub span: Span,
}

/// A whole IDL file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IdlFile {
    pub items: Vec<Item>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// `Module name;`
    Module(Ident),
    /// `Library "-lm";`: linker flags for every routine of the module.
    Library(StringLit),
    /// `Required "obj.o";`: object files or libraries every routine needs.
    Required(StringLit),
    Define(Box<Define>),
}

/// `Define name(params) ["description"] clauses* Calls "lang" callee(args);`
#[derive(Debug, Clone, PartialEq)]
pub struct Define {
    pub name: Ident,
    pub params: Vec<Param>,
    pub description: Option<StringLit>,
    /// In source order; the checker rejects repeats.
    pub clauses: Vec<Clause>,
    pub calls: Calls,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Clause {
    /// `Required "obj"`: extra objects this routine links.
    Required(StringLit),
    /// `Backend "MPI"`: how the routine's processes are launched.
    Backend(StringLit),
    /// `CalcOrder expr`: floating-point operations of one call.
    CalcOrder(Expr),
    /// `Parallel expr`: the routine runs SPMD over this many processors.
    Parallel(Expr),
    /// `Threads`: one process that computes with as many threads as the call is given
    /// (cores idle elsewhere on its host; `ninf_executable::threads`).
    Threads(Span),
}

impl Clause {
    pub fn keyword(&self) -> &'static str {
        match self {
            Clause::Required(_) => "Required",
            Clause::Backend(_) => "Backend",
            Clause::CalcOrder(_) => "CalcOrder",
            Clause::Parallel(_) => "Parallel",
            Clause::Threads(_) => "Threads",
        }
    }
}

/// `Calls "C" name(args);` or `Calls "Rust" path::to::function(args);`
#[derive(Debug, Clone, PartialEq)]
pub struct Calls {
    pub language: StringLit,
    pub path: Vec<Ident>,
    pub args: Vec<Ident>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub mode: Mode,
    pub element_type: ElementType,
    pub name: Ident,
    /// Outermost first; empty for a scalar.
    pub dims: Vec<Expr>,
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Mode {
    In,
    Out,
    InOut,
    Work,
}

impl Mode {
    pub const ALL: [Mode; 4] = [Mode::In, Mode::Out, Mode::InOut, Mode::Work];

    pub fn keyword(self) -> &'static str {
        match self {
            Mode::In => "IN",
            Mode::Out => "OUT",
            Mode::InOut => "INOUT",
            Mode::Work => "WORK",
        }
    }

    /// Whether the caller's data travels to the routine.
    pub fn is_input(self) -> bool {
        matches!(self, Mode::In | Mode::InOut)
    }

    /// Whether the routine's data travels back to the caller.
    pub fn is_output(self) -> bool {
        matches!(self, Mode::Out | Mode::InOut)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ElementType {
    Char,
    Short,
    Int,
    Long,
    Float,
    Double,
    Scomplex,
    Dcomplex,
    String,
    Filename,
}

impl ElementType {
    pub const ALL: [ElementType; 10] = [
        ElementType::Char,
        ElementType::Short,
        ElementType::Int,
        ElementType::Long,
        ElementType::Float,
        ElementType::Double,
        ElementType::Scomplex,
        ElementType::Dcomplex,
        ElementType::String,
        ElementType::Filename,
    ];

    pub fn keyword(self) -> &'static str {
        match self {
            ElementType::Char => "char",
            ElementType::Short => "short",
            ElementType::Int => "int",
            ElementType::Long => "long",
            ElementType::Float => "float",
            ElementType::Double => "double",
            ElementType::Scomplex => "scomplex",
            ElementType::Dcomplex => "dcomplex",
            ElementType::String => "string",
            ElementType::Filename => "filename",
        }
    }

    pub fn from_keyword(word: &str) -> Option<ElementType> {
        ElementType::ALL.into_iter().find(|t| t.keyword() == word)
    }

    /// Bytes of one element on the wire; `None` for strings and files, whose size is their
    /// content's.
    pub fn size_bytes(self) -> Option<u64> {
        match self {
            ElementType::Char => Some(1),
            ElementType::Short => Some(2),
            ElementType::Int | ElementType::Float => Some(4),
            ElementType::Long | ElementType::Double | ElementType::Scomplex => Some(8),
            ElementType::Dcomplex => Some(16),
            ElementType::String | ElementType::Filename => None,
        }
    }

    /// Whether an integer value fits a scalar of this type (`char` is unsigned, as bytes).
    pub fn fits_integer(self, value: i64) -> bool {
        match self {
            ElementType::Char => u8::try_from(value).is_ok(),
            ElementType::Short => i16::try_from(value).is_ok(),
            ElementType::Int => i32::try_from(value).is_ok(),
            ElementType::Long => true,
            _ => false,
        }
    }

    /// The type with its article, for messages: "an int", "a double".
    pub fn with_article(self) -> String {
        let article = if self == ElementType::Int { "an" } else { "a" };
        format!("{article} {}", self.keyword())
    }

    /// Types whose IN scalars may appear in dimension and cost expressions.
    pub fn is_integer(self) -> bool {
        matches!(
            self,
            ElementType::Char | ElementType::Short | ElementType::Int | ElementType::Long
        )
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    Integer(i64),
    Float(f64),
    Name(String),
    Negate(Box<Expr>),
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    /// `condition ? then : otherwise`
    Conditional(Box<Expr>, Box<Expr>, Box<Expr>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Pow,
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
    Equal,
    NotEqual,
}

impl BinaryOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Rem => "%",
            BinaryOp::Pow => "^",
            BinaryOp::Less => "<",
            BinaryOp::LessEqual => "<=",
            BinaryOp::Greater => ">",
            BinaryOp::GreaterEqual => ">=",
            BinaryOp::Equal => "==",
            BinaryOp::NotEqual => "!=",
        }
    }

    /// Binding strength; higher binds tighter. `?:` is 1, unary minus 6, primaries 8.
    pub fn precedence(self) -> u8 {
        match self {
            BinaryOp::Equal | BinaryOp::NotEqual => 2,
            BinaryOp::Less | BinaryOp::LessEqual | BinaryOp::Greater | BinaryOp::GreaterEqual => 3,
            BinaryOp::Add | BinaryOp::Sub => 4,
            BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem => 5,
            BinaryOp::Pow => 7,
        }
    }
}

pub(crate) const PRECEDENCE_CONDITIONAL: u8 = 1;
pub(crate) const PRECEDENCE_UNARY: u8 = 6;
pub(crate) const PRECEDENCE_PRIMARY: u8 = 8;

impl Expr {
    pub fn new(kind: ExprKind, span: Span) -> Self {
        Expr { kind, span }
    }

    fn precedence(&self) -> u8 {
        match &self.kind {
            ExprKind::Integer(_) | ExprKind::Float(_) | ExprKind::Name(_) => PRECEDENCE_PRIMARY,
            ExprKind::Negate(_) => PRECEDENCE_UNARY,
            ExprKind::Binary(op, _, _) => op.precedence(),
            ExprKind::Conditional(..) => PRECEDENCE_CONDITIONAL,
        }
    }

    /// Every name the expression reads, with where it reads it.
    pub fn names(&self) -> Vec<(&str, Span)> {
        let mut out = Vec::new();
        self.collect_names(&mut out);
        out
    }

    fn collect_names<'a>(&'a self, out: &mut Vec<(&'a str, Span)>) {
        match &self.kind {
            ExprKind::Name(name) => out.push((name, self.span)),
            ExprKind::Integer(_) | ExprKind::Float(_) => {}
            ExprKind::Negate(e) => e.collect_names(out),
            ExprKind::Binary(_, a, b) => {
                a.collect_names(out);
                b.collect_names(out);
            }
            ExprKind::Conditional(c, a, b) => {
                c.collect_names(out);
                a.collect_names(out);
                b.collect_names(out);
            }
        }
    }

    /// The first floating-point literal in the expression, if any.
    pub fn first_float(&self) -> Option<&Expr> {
        match &self.kind {
            ExprKind::Float(_) => Some(self),
            ExprKind::Integer(_) | ExprKind::Name(_) => None,
            ExprKind::Negate(e) => e.first_float(),
            ExprKind::Binary(_, a, b) => a.first_float().or_else(|| b.first_float()),
            ExprKind::Conditional(c, a, b) => c
                .first_float()
                .or_else(|| a.first_float())
                .or_else(|| b.first_float()),
        }
    }

    fn write_at(&self, out: &mut impl Write, min_precedence: u8) -> fmt::Result {
        let parenthesize = self.precedence() < min_precedence;
        if parenthesize {
            out.write_char('(')?;
        }
        match &self.kind {
            ExprKind::Integer(v) => write!(out, "{v}")?,
            ExprKind::Float(v) => write!(out, "{v:?}")?,
            ExprKind::Name(name) => out.write_str(name)?,
            ExprKind::Negate(e) => {
                out.write_char('-')?;
                e.write_at(out, PRECEDENCE_UNARY)?;
            }
            ExprKind::Binary(BinaryOp::Pow, base, exponent) => {
                // Right-associative; the exponent may carry its own unary minus (`2 ^ -1`).
                base.write_at(out, PRECEDENCE_PRIMARY)?;
                out.write_str(" ^ ")?;
                exponent.write_at(out, PRECEDENCE_UNARY)?;
            }
            ExprKind::Binary(op, left, right) => {
                left.write_at(out, op.precedence())?;
                write!(out, " {} ", op.symbol())?;
                right.write_at(out, op.precedence() + 1)?;
            }
            ExprKind::Conditional(condition, then, otherwise) => {
                condition.write_at(out, PRECEDENCE_CONDITIONAL + 1)?;
                out.write_str(" ? ")?;
                then.write_at(out, PRECEDENCE_CONDITIONAL)?;
                out.write_str(" : ")?;
                otherwise.write_at(out, PRECEDENCE_CONDITIONAL)?;
            }
        }
        if parenthesize {
            out.write_char(')')?;
        }
        Ok(())
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_at(f, PRECEDENCE_CONDITIONAL)
    }
}

/// Writes a string literal with the escapes the lexer understands.
pub(crate) fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl fmt::Display for Param {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {}",
            self.mode.keyword(),
            self.element_type.keyword(),
            self.name.name
        )?;
        for dim in &self.dims {
            write!(f, "[{dim}]")?;
        }
        Ok(())
    }
}

impl fmt::Display for Define {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Define {}(", self.name.name)?;
        for (i, param) in self.params.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{param}")?;
        }
        f.write_str(")\n")?;
        if let Some(description) = &self.description {
            writeln!(f, "    {}", quote(&description.value))?;
        }
        for clause in &self.clauses {
            match clause {
                Clause::Required(s) | Clause::Backend(s) => {
                    writeln!(f, "    {} {}", clause.keyword(), quote(&s.value))?
                }
                Clause::CalcOrder(e) | Clause::Parallel(e) => {
                    writeln!(f, "    {} {e}", clause.keyword())?
                }
                Clause::Threads(_) => writeln!(f, "    {}", clause.keyword())?,
            }
        }
        let path: Vec<&str> = self.calls.path.iter().map(|p| p.name.as_str()).collect();
        let args: Vec<&str> = self.calls.args.iter().map(|a| a.name.as_str()).collect();
        write!(
            f,
            "    Calls {} {}({});",
            quote(&self.calls.language.value),
            path.join("::"),
            args.join(", ")
        )
    }
}

impl fmt::Display for IdlFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, item) in self.items.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            match item {
                Item::Module(name) => writeln!(f, "Module {};", name.name)?,
                Item::Library(s) => writeln!(f, "Library {};", quote(&s.value))?,
                Item::Required(s) => writeln!(f, "Required {};", quote(&s.value))?,
                Item::Define(define) => writeln!(f, "{define}")?,
            }
        }
        Ok(())
    }
}
