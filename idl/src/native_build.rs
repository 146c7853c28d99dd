//! `ninf-gen build`: a module of C and Fortran routines made into a ready executable
//! (`ninf-exec-<module>`) with the system's compilers, without Cargo or this project's
//! sources. The glue ([`crate::codegen::c`]) is compiled with `cc`, the IDL's `Required`
//! sources with `cc` (`.c`) or `gfortran` (`.f`, `.f90`, ...), objects and archives are
//! linked as they are, `Library` flags are passed, and the executable runtime comes from
//! `libninf_exec.a`, installed beside `ninf-gen`.
//!
//! A failed step says which command failed with the compiler's own output, and which IDL
//! line named the file (or, for a symbol the objects do not define, which `Calls`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::ast::{Clause, Item};
use crate::diagnostic::{SourceFile, Span};
use crate::interface::{Language, ModuleInterface};
use crate::{CompileError, codegen};

/// What to build and with what.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// The module's IDL file.
    pub idl: PathBuf,
    /// Where to write `ninf-exec-<module>`; the IDL's folder when `None`.
    pub out_dir: Option<PathBuf>,
    /// `libninf_exec.a`; found beside `ninf-gen` (or in `../lib`) when `None`.
    pub runtime: Option<PathBuf>,
    /// The C compiler (`$CC`, else `cc`) and the Fortran compiler (`$FC`, else `gfortran`).
    pub cc: String,
    pub fc: String,
}

impl BuildOptions {
    /// Options for `idl` with the compilers the environment names.
    pub fn new(idl: PathBuf) -> BuildOptions {
        BuildOptions {
            idl,
            out_dir: None,
            runtime: None,
            cc: std::env::var("CC").unwrap_or_else(|_| "cc".into()),
            fc: std::env::var("FC").unwrap_or_else(|_| "gfortran".into()),
        }
    }
}

/// What was built.
#[derive(Debug, Clone)]
pub struct Built {
    pub executable: PathBuf,
    pub module: String,
    pub seconds: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Idl(#[from] CompileError),
    #[error("{location}: error: {message}")]
    AtLine { location: String, message: String },
    #[error("{0}")]
    Other(String),
    #[error("{step} failed:\n  $ {command}\n{output}{hint}")]
    Command {
        step: String,
        command: String,
        output: String,
        hint: String,
    },
}

/// Where the IDL names things: file:line:col of each `Required`/`Library` string and of each
/// routine's `Calls`.
struct Places {
    source: SourceFile,
    strings: Vec<(String, Span)>,
    calls: Vec<(String, Span)>,
}

impl Places {
    fn new(source: SourceFile) -> Places {
        let (file, _) = crate::parser::parse(source.text());
        let mut strings = Vec::new();
        let mut calls = Vec::new();
        for item in &file.items {
            match item {
                Item::Library(s) | Item::Required(s) => strings.push((s.value.clone(), s.span)),
                Item::Define(define) => {
                    for clause in &define.clauses {
                        if let Clause::Required(s) = clause {
                            strings.push((s.value.clone(), s.span));
                        }
                    }
                    let path: Vec<&str> =
                        define.calls.path.iter().map(|p| p.name.as_str()).collect();
                    calls.push((path.join("::"), define.calls.span));
                }
                Item::Module(_) => {}
            }
        }
        Places {
            source,
            strings,
            calls,
        }
    }

    fn at(&self, span: Span) -> String {
        let (line, col) = self.source.line_col(span.start);
        format!("{}:{line}:{col}", self.source.name())
    }

    /// Where the IDL names the file or flags `value`.
    fn string(&self, value: &str) -> String {
        self.strings.iter().find(|(v, _)| v == value).map_or_else(
            || self.source.name().to_string(),
            |(_, span)| self.at(*span),
        )
    }

    /// Where a `Calls` names the routine whose object symbol is `symbol`.
    fn callee(&self, symbol: &str) -> Option<String> {
        self.calls
            .iter()
            .find(|(name, _)| name == symbol || codegen::c::fortran_symbol(name) == symbol)
            .map(|(_, span)| self.at(*span))
    }
}

fn fail_at(location: String, message: impl Into<String>) -> BuildError {
    BuildError::AtLine {
        location,
        message: message.into(),
    }
}

/// Builds the module's executable.
pub fn build(options: &BuildOptions) -> Result<Built, BuildError> {
    let started = Instant::now();
    let text = std::fs::read_to_string(&options.idl).map_err(|source| CompileError::Read {
        path: options.idl.clone(),
        source,
    })?;
    let source = SourceFile::new(options.idl.display().to_string(), text.clone());
    let module = crate::compile(&source).map_err(CompileError::Invalid)?;
    let places = Places::new(source);
    refuse_rust(&module, &places)?;
    let idl_dir = options
        .idl
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let out_dir = options.out_dir.clone().unwrap_or_else(|| idl_dir.clone());
    let runtime = find_runtime(options.runtime.as_deref())?;
    let work = out_dir.join(format!(".ninf-build-{}", module.module));
    std::fs::create_dir_all(&work)
        .map_err(|e| BuildError::Other(format!("cannot create {}: {e}", work.display())))?;
    let idl_name = options
        .idl
        .file_name()
        .map_or_else(|| "module.idl".into(), |n| n.to_string_lossy().into_owned());
    let glue = work.join("glue.c");
    std::fs::write(&glue, codegen::c::generate(&module, &idl_name, &text))
        .map_err(|e| BuildError::Other(format!("cannot write {}: {e}", glue.display())))?;
    let glue_object = work.join("glue.o");
    let mut inputs = vec![compile(
        &options.cc,
        &glue,
        &glue_object,
        "compiling the glue",
        None,
    )?];
    let mut fortran = false;
    for required in required_files(&module) {
        let path = idl_dir.join(&required);
        let place = places.string(&required);
        if !path.exists() {
            return Err(fail_at(
                place,
                format!("`Required \"{required}\"`: no file {}", path.display()),
            ));
        }
        let object = work.join(format!("{}.o", sanitize(&required)));
        let step = format!("compiling {required} (named at {place})");
        let input = match kind(&required) {
            Kind::C => compile(&options.cc, &path, &object, &step, Some(&place))?,
            Kind::Fortran => {
                fortran = true;
                compile(&options.fc, &path, &object, &step, Some(&place))?
            }
            Kind::Linked => path,
            Kind::Unknown => {
                return Err(fail_at(
                    place,
                    format!(
                        "`Required \"{required}\"`: not a C (.c) or Fortran (.f, .f90, ...) source, an object (.o) or a library (.a, .so)"
                    ),
                ));
            }
        };
        inputs.push(input);
    }
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| BuildError::Other(format!("cannot create {}: {e}", out_dir.display())))?;
    let executable = out_dir.join(format!("ninf-exec-{}", module.module));
    link(
        options,
        &module,
        &inputs,
        &runtime,
        fortran,
        &executable,
        &places,
    )?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(Built {
        executable,
        module: module.module.clone(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn refuse_rust(module: &ModuleInterface, places: &Places) -> Result<(), BuildError> {
    match module
        .functions
        .iter()
        .find(|f| f.callee.language == Language::Rust)
    {
        Some(f) => Err(fail_at(
            places
                .callee(&f.callee.path)
                .unwrap_or_else(|| places.source.name().to_string()),
            format!(
                "`{}` calls a Rust routine: Rust modules are built by Cargo (`ninf-gen rust`, or `ninf_idl::build::compile_module` in a build.rs; docs/authors.md); `ninf-gen build` compiles C and Fortran",
                f.name
            ),
        )),
        None => Ok(()),
    }
}

/// The module's and its routines' `Required` files, each once, in order.
fn required_files(module: &ModuleInterface) -> Vec<String> {
    let mut files: Vec<String> = Vec::new();
    let all = module
        .required
        .iter()
        .chain(module.functions.iter().flat_map(|f| f.required.iter()));
    for file in all {
        if !files.contains(file) {
            files.push(file.clone());
        }
    }
    files
}

enum Kind {
    C,
    Fortran,
    Linked,
    Unknown,
}

fn kind(file: &str) -> Kind {
    let extension = Path::new(file)
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("");
    match extension {
        "c" => Kind::C,
        "f" | "for" | "f77" | "f90" | "f95" | "f03" | "f08" | "F" | "F90" => Kind::Fortran,
        "o" | "a" | "so" => Kind::Linked,
        _ => Kind::Unknown,
    }
}

fn sanitize(file: &str) -> String {
    file.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// `libninf_exec.a`: the given path, else beside this program or in its `../lib`.
fn find_runtime(given: Option<&Path>) -> Result<PathBuf, BuildError> {
    let name = "libninf_exec.a";
    let mut candidates: Vec<PathBuf> = given.map(Path::to_path_buf).into_iter().collect();
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent()
    {
        candidates.push(dir.join(name));
        candidates.push(dir.join("../lib").join(name));
    }
    candidates.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        BuildError::Other(format!(
            "cannot find the executable runtime {name} (looked in {}); install the grid with `scripts/install PREFIX` (it puts {name} in PREFIX/lib, beside PREFIX/bin/ninf-gen), build it with `cargo build --release --workspace --lib` (into target/release), or pass --runtime",
            candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

fn run(step: &str, command: &mut Command, hint: impl Fn(&str) -> String) -> Result<(), BuildError> {
    let shown = format!("{command:?}").replace('"', "");
    let output = command.output().map_err(|e| BuildError::Command {
        step: step.to_string(),
        command: shown.clone(),
        output: format!("{e}\n"),
        hint: String::new(),
    })?;
    if output.status.success() {
        return Ok(());
    }
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Err(BuildError::Command {
        step: step.to_string(),
        command: shown,
        hint: hint(&text),
        output: text,
    })
}

/// Compiles `source` into `object` with `compiler`; a failure names the IDL line that
/// named the source, when there is one.
fn compile(
    compiler: &str,
    source: &Path,
    object: &Path,
    step: &str,
    place: Option<&str>,
) -> Result<PathBuf, BuildError> {
    let mut command = Command::new(compiler);
    command
        .args(["-c", "-O2", "-fPIC", "-o"])
        .arg(object)
        .arg(source);
    run(step, &mut command, |_| {
        place.map_or(String::new(), |p| format!("(the source is named at {p})\n"))
    })?;
    Ok(object.to_path_buf())
}

fn link(
    options: &BuildOptions,
    module: &ModuleInterface,
    inputs: &[PathBuf],
    runtime: &Path,
    fortran: bool,
    executable: &Path,
    places: &Places,
) -> Result<(), BuildError> {
    let mut command = Command::new(&options.cc);
    command.arg("-o").arg(executable).args(inputs).arg(runtime);
    for flags in &module.libraries {
        command.args(flags.split_whitespace());
    }
    if fortran {
        command.arg("-lgfortran");
    }
    command.args(["-lpthread", "-ldl", "-lm"]);
    run("linking", &mut command, |output| {
        link_hint(output, module, places)
    })
}

/// Which IDL line a link error points back to: an undefined routine's `Calls`, or the
/// `Library` flags when a library is missing.
fn link_hint(output: &str, module: &ModuleInterface, places: &Places) -> String {
    let mut hints = Vec::new();
    for line in output.lines() {
        if let Some(symbol) = line
            .split("undefined reference to `")
            .nth(1)
            .and_then(|rest| rest.split('\'').next())
            && let Some(place) = places.callee(symbol)
        {
            hints.push(format!(
                "{place}: `{symbol}`, named by this `Calls`, is defined by none of the objects and libraries"
            ));
        }
        if line.contains("cannot find -l") {
            for flags in &module.libraries {
                hints.push(format!(
                    "{}: the `Library` flags \"{flags}\"",
                    places.string(flags)
                ));
            }
        }
    }
    hints.dedup();
    hints.iter().map(|h| format!("{h}\n")).collect()
}

/// What was built and how long it took, for people.
pub fn describe(built: &Built) -> String {
    format!(
        "built {} (module `{}`) in {:.2} s",
        built.executable.display(),
        built.module,
        built.seconds
    )
}
