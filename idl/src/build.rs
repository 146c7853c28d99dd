//! Helpers for `build.rs` scripts: compile an IDL file into `OUT_DIR` and tell Cargo how to
//! link the module's C objects and libraries.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::{CompileError, ModuleInterface, codegen};

#[derive(Debug)]
pub enum BuildError {
    Compile(CompileError),
    Io(std::io::Error),
    NoOutDir,
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Compile(CompileError::Invalid(d)) => write!(f, "{d}"),
            BuildError::Compile(e) => write!(f, "{e}"),
            BuildError::Io(e) => write!(f, "cannot write generated code: {e}"),
            BuildError::NoOutDir => write!(f, "OUT_DIR is not set: call this from a build script"),
        }
    }
}

impl std::error::Error for BuildError {}

/// Compiles `idl` and writes `<module>_client.rs` and `<module>_executable.rs` into `OUT_DIR`.
/// Prints `cargo:rerun-if-changed` for the file and, for each `Library` flag and `Required`
/// object (relative to the IDL file's folder), a `cargo:rustc-link-arg-bins` line so the
/// executable links them.
pub fn compile_module(idl: &Path) -> Result<ModuleInterface, BuildError> {
    println!("cargo:rerun-if-changed={}", idl.display());
    let module = crate::compile_file(idl).map_err(BuildError::Compile)?;
    let out_dir = std::env::var_os("OUT_DIR")
        .map(PathBuf::from)
        .ok_or(BuildError::NoOutDir)?;
    codegen::rust::write_module(&module, &out_dir).map_err(BuildError::Io)?;
    let base = idl.parent().unwrap_or(Path::new("."));
    let mut required: Vec<&String> = module.required.iter().collect();
    required.extend(module.functions.iter().flat_map(|f| &f.required));
    required.dedup();
    for object in required {
        let path = base.join(object);
        println!("cargo:rerun-if-changed={}", path.display());
        println!("cargo:rustc-link-arg-bins={}", path.display());
    }
    for flags in &module.libraries {
        for flag in flags.split_whitespace() {
            println!("cargo:rustc-link-arg-bins={flag}");
        }
    }
    Ok(module)
}
