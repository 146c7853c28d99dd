//! `ninf-gen`: the Ninf stub compiler. Checks IDL files, prints interface descriptors and
//! call costs as JSON, and generates Rust client stubs and server-side executables.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use ninf_idl::{CompileError, ModuleInterface};

#[derive(Parser)]
#[command(name = "ninf-gen", version, about = "The Ninf IDL stub compiler")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check an IDL file; print every error and exit 1 if there is any.
    Check { file: PathBuf },
    /// Print the interface descriptors of an IDL file as JSON.
    Interface { file: PathBuf },
    /// Print the cost of one call as JSON: `ninf-gen cost linpack.idl dgefa n=700`.
    Cost {
        file: PathBuf,
        function: String,
        /// Values of the IN integer scalars, as `name=value`.
        values: Vec<String>,
    },
    /// Build the executable of a module of C and Fortran routines (`ninf-exec-<module>`)
    /// with the system's compilers: no Cargo project needed (docs/authors.md).
    Build {
        file: PathBuf,
        /// Folder to write `ninf-exec-<module>` into (default: the IDL's folder).
        #[arg(short, long)]
        out: Option<PathBuf>,
        /// The executable runtime `libninf_exec.a` (default: beside ninf-gen, or ../lib).
        #[arg(long)]
        runtime: Option<PathBuf>,
    },
    /// Generate Rust client stubs and the server-side executable for a module.
    Rust {
        file: PathBuf,
        /// Directory to write `<module>_client.rs` and `<module>_executable.rs` into.
        #[arg(long)]
        out: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            match (
                error.downcast_ref::<CompileError>(),
                error.downcast_ref::<ninf_idl::native_build::BuildError>(),
            ) {
                (Some(CompileError::Invalid(diagnostics)), _)
                | (
                    _,
                    Some(ninf_idl::native_build::BuildError::Idl(CompileError::Invalid(
                        diagnostics,
                    ))),
                ) => {
                    eprintln!("{diagnostics}")
                }
                (_, Some(build)) => eprintln!("ninf-gen: {build}"),
                _ => eprintln!("ninf-gen: error: {error:#}"),
            }
            ExitCode::FAILURE
        }
    }
}

fn load(file: &std::path::Path) -> anyhow::Result<ModuleInterface> {
    Ok(ninf_idl::compile_file(file)?)
}

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Check { file } => {
            let module = load(&file)?;
            eprintln!(
                "{}: ok: module `{}`, {} function(s)",
                file.display(),
                module.module,
                module.functions.len()
            );
        }
        Command::Interface { file } => {
            let module = load(&file)?;
            println!("{}", serde_json::to_string_pretty(&module)?);
        }
        Command::Cost {
            file,
            function,
            values,
        } => {
            let module = load(&file)?;
            let Some(f) = module.function(&function) else {
                let names: Vec<&str> = module.functions.iter().map(|f| f.name.as_str()).collect();
                bail!(
                    "module `{}` has no function `{function}` (it has: {})",
                    module.module,
                    names.join(", ")
                );
            };
            let bindings = parse_values(f, &values)?;
            let cost = f
                .cost(&bindings)
                .with_context(|| format!("cannot compute the cost of `{function}`"))?;
            println!("{}", serde_json::to_string(&cost)?);
        }
        Command::Build { file, out, runtime } => {
            let mut options = ninf_idl::native_build::BuildOptions::new(file);
            options.out_dir = out;
            options.runtime = runtime;
            let built = ninf_idl::native_build::build(&options)?;
            println!("{}", built.executable.display());
            eprintln!("{}", ninf_idl::native_build::describe(&built));
        }
        Command::Rust { file, out } => {
            let module = load(&file)?;
            let written = ninf_idl::codegen::rust::write_module(&module, &out)?;
            for path in written {
                eprintln!("wrote {}", path.display());
            }
        }
    }
    Ok(())
}

/// Parses `name=value` pairs, each naming an IN integer scalar of the function.
fn parse_values(
    function: &ninf_idl::FunctionInterface,
    values: &[String],
) -> anyhow::Result<BTreeMap<String, i64>> {
    let mut bindings = BTreeMap::new();
    for pair in values {
        let Some((name, value)) = pair.split_once('=') else {
            bail!("expected `name=value`, got `{pair}`");
        };
        let Some((_, parameter)) = function.parameter(name) else {
            bail!("`{}` has no parameter `{name}`", function.name);
        };
        if parameter.is_array()
            || parameter.mode != ninf_idl::Mode::In
            || !parameter.element_type.is_integer()
        {
            bail!(
                "`{name}` is `{}`; only IN integer scalars take a value",
                parameter.declaration()
            );
        }
        let value: i64 = value
            .trim()
            .parse()
            .with_context(|| format!("value of `{name}` must be an integer, got `{value}`"))?;
        bindings.insert(name.to_string(), value);
    }
    Ok(bindings)
}
