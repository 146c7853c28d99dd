//! Checked interface descriptors: what a server publishes about each routine and what a
//! client needs to call it without generated stubs. Produced by the checker from an IDL
//! file, or rebuilt (and re-checked) from a descriptor received over the network.

use serde::{Serialize, Serializer};

use crate::ast::{ElementType, Expr, Mode};

/// One IDL module: its routines and the link inputs they share.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModuleInterface {
    pub module: String,
    pub libraries: Vec<String>,
    pub required: Vec<String>,
    pub functions: Vec<FunctionInterface>,
}

impl ModuleInterface {
    pub fn function(&self, name: &str) -> Option<&FunctionInterface> {
        self.functions.iter().find(|f| f.name == name)
    }
}

/// Everything known about one routine.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionInterface {
    pub name: String,
    pub module: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub parameters: Vec<Parameter>,
    /// Floating-point operations of one call.
    #[serde(serialize_with = "serialize_optional_expr")]
    pub calc_order: Option<Expr>,
    /// How the routine runs: sequentially or SPMD over a number of processors.
    pub parallelism: Parallelism,
    /// Extra objects this routine links.
    pub required: Vec<String>,
    pub callee: Callee,
}

impl FunctionInterface {
    pub fn parameter(&self, name: &str) -> Option<(usize, &Parameter)> {
        self.parameters
            .iter()
            .enumerate()
            .find(|(_, p)| p.name == name)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Parallelism {
    /// One process on one processor.
    Sequential,
    /// One process on one processor that may compute with more threads, on cores idle
    /// elsewhere on its host, when the call is given them (IDL `Threads`).
    Threads,
    /// SPMD over `processors` processors, launched through `backend` (for example "MPI").
    Parallel {
        #[serde(serialize_with = "serialize_expr")]
        processors: Expr,
        #[serde(skip_serializing_if = "Option::is_none")]
        backend: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Parameter {
    pub name: String,
    pub mode: Mode,
    #[serde(rename = "type")]
    pub element_type: ElementType,
    /// Outermost first; empty for a scalar.
    #[serde(serialize_with = "serialize_exprs")]
    pub dimensions: Vec<Expr>,
}

impl Parameter {
    pub fn is_array(&self) -> bool {
        !self.dimensions.is_empty()
    }

    /// An array's shape for a size message: `n x n = 100 x 100`, or `double a[4]` when the
    /// dimensions are constants. `dims` are the evaluated dimensions.
    pub fn shape(&self, dims: &[u64]) -> String {
        let exprs: Vec<String> = self.dimensions.iter().map(ToString::to_string).collect();
        let values: Vec<String> = dims.iter().map(ToString::to_string).collect();
        let (exprs, values) = (exprs.join(" x "), values.join(" x "));
        if exprs == values {
            format!("{} {}[{exprs}]", self.element_type.keyword(), self.name)
        } else {
            format!("{exprs} = {values}")
        }
    }

    /// How the parameter reads in a message: `IN double a[n][n]`.
    pub fn declaration(&self) -> String {
        let mut out = format!(
            "{} {} {}",
            self.mode.keyword(),
            self.element_type.keyword(),
            self.name
        );
        for d in &self.dimensions {
            out.push_str(&format!("[{d}]"));
        }
        out
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Language {
    C,
    Rust,
    /// Every argument by reference; the symbol as gfortran names it.
    Fortran,
}

impl Language {
    pub fn name(self) -> &'static str {
        match self {
            Language::C => "C",
            Language::Rust => "Rust",
            Language::Fortran => "Fortran",
        }
    }
}

/// The routine a `Calls` clause names and the order it takes the parameters in.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Callee {
    pub language: Language,
    /// C symbol, or Rust path segments joined by `::`.
    pub path: String,
    /// Parameter names, in the order the routine takes them.
    pub arguments: Vec<String>,
}

fn serialize_expr<S: Serializer>(expr: &Expr, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(expr)
}

fn serialize_optional_expr<S: Serializer>(expr: &Option<Expr>, s: S) -> Result<S::Ok, S::Error> {
    match expr {
        Some(e) => s.collect_str(e),
        None => s.serialize_none(),
    }
}

fn serialize_exprs<S: Serializer>(exprs: &[Expr], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(exprs.iter().map(ToString::to_string))
}

impl FunctionInterface {
    /// The definition as a syntax tree (locations empty), e.g. to print it as IDL.
    pub fn to_define(&self) -> crate::ast::Define {
        use crate::ast::{Calls, Clause, Define, Ident, Param, StringLit};
        use crate::diagnostic::Span;
        let ident = |name: &str| Ident {
            name: name.to_string(),
            span: Span::default(),
        };
        let string = |value: &str| StringLit {
            value: value.to_string(),
            span: Span::default(),
        };
        let mut clauses: Vec<Clause> = self
            .required
            .iter()
            .map(|r| Clause::Required(string(r)))
            .collect();
        if let Parallelism::Parallel {
            processors,
            backend,
        } = &self.parallelism
        {
            if let Some(b) = backend {
                clauses.push(Clause::Backend(string(b)));
            }
            clauses.push(Clause::Parallel(processors.clone()));
        }
        if self.parallelism == Parallelism::Threads {
            clauses.push(Clause::Threads(Span::default()));
        }
        if let Some(c) = &self.calc_order {
            clauses.push(Clause::CalcOrder(c.clone()));
        }
        Define {
            name: ident(&self.name),
            params: self
                .parameters
                .iter()
                .map(|p| Param {
                    mode: p.mode,
                    element_type: p.element_type,
                    name: ident(&p.name),
                    dims: p.dimensions.clone(),
                    span: Span::default(),
                })
                .collect(),
            description: self.description.as_deref().map(string),
            clauses,
            calls: Calls {
                language: string(self.callee.language.name()),
                path: self.callee.path.split("::").map(ident).collect(),
                args: self.callee.arguments.iter().map(|a| ident(a)).collect(),
                span: Span::default(),
            },
            span: Span::default(),
        }
    }
}

impl ModuleInterface {
    /// The module as canonical IDL text; compiling it gives this module again.
    pub fn to_idl(&self) -> String {
        use crate::ast::{IdlFile, Item, StringLit};
        let string = |value: &String| StringLit {
            value: value.clone(),
            span: crate::diagnostic::Span::default(),
        };
        let mut items = vec![Item::Module(crate::ast::Ident {
            name: self.module.clone(),
            span: crate::diagnostic::Span::default(),
        })];
        items.extend(self.libraries.iter().map(|l| Item::Library(string(l))));
        items.extend(self.required.iter().map(|r| Item::Required(string(r))));
        items.extend(
            self.functions
                .iter()
                .map(|f| Item::Define(Box::new(f.to_define()))),
        );
        IdlFile { items }.to_string()
    }
}
