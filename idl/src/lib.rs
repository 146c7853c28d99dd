//! The Ninf IDL: lexer, parser, checker with `file:line:col` diagnostics, expression
//! evaluation and the cost model, and the stub compiler behind `ninf-gen` (library API for
//! `build.rs` scripts and the command-line tool).
//!
//! ```
//! let source = ninf_idl::SourceFile::new("mmul.idl", r#"
//!     Module blas;
//!     Define mmul(IN int n, IN double A[n][n], IN double B[n][n], OUT double C[n][n])
//!         CalcOrder 2 * n ^ 3
//!         Calls "C" mmul(n, A, B, C);
//! "#);
//! let module = ninf_idl::compile(&source).unwrap();
//! let cost = module.function("mmul").unwrap().cost(&[("n", 100)]).unwrap();
//! assert_eq!((cost.bytes_in, cost.bytes_out, cost.flops), (160_000, 80_000, 2e6));
//! ```

pub mod ast;
pub mod build;
pub mod check;
pub mod codegen;
pub mod cost;
pub mod diagnostic;
pub mod eval;
pub mod interface;
pub mod lexer;
pub mod native_build;
pub mod parser;

use std::path::{Path, PathBuf};

pub use ast::{ElementType, Mode};
pub use cost::{CostError, CostEstimate};
pub use diagnostic::{Diagnostic, Diagnostics, SourceFile, Span};
pub use eval::{Bindings, EvalError};
pub use interface::{Callee, FunctionInterface, Language, ModuleInterface, Parallelism, Parameter};

/// Why an IDL file could not be compiled.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(Diagnostics),
}

/// Parses a file into its syntax tree, reporting every syntax error.
pub fn parse(source: &SourceFile) -> Result<ast::IdlFile, Diagnostics> {
    let (file, items) = parser::parse(source.text());
    if items.is_empty() {
        Ok(file)
    } else {
        Err(Diagnostics {
            file: source.clone(),
            items,
        })
    }
}

/// Parses and checks a file, reporting every syntax and semantic error together.
pub fn compile(source: &SourceFile) -> Result<ModuleInterface, Diagnostics> {
    let (file, mut items) = parser::parse(source.text());
    let (module, mut semantic) =
        check::check_file(&file, source, &default_module_name(source.name()));
    items.append(&mut semantic);
    if items.is_empty() {
        Ok(module)
    } else {
        items.sort_by_key(|d| d.span.start);
        Err(Diagnostics {
            file: source.clone(),
            items,
        })
    }
}

/// Reads and compiles an IDL file.
pub fn compile_file(path: &Path) -> Result<ModuleInterface, CompileError> {
    let text = std::fs::read_to_string(path).map_err(|source| CompileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    compile(&SourceFile::new(path.display().to_string(), text)).map_err(CompileError::Invalid)
}

/// The module name of a file without `Module`: its file stem, made an identifier.
fn default_module_name(file_name: &str) -> String {
    let stem = Path::new(file_name)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("module");
    let mut name: String = stem
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        name.insert(0, '_');
    }
    name
}
