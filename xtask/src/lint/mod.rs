//! `cargo xtask lint`: the layering rules `docs/architecture.md` states, checked on the code.
//! It parses every non-test Rust file of every build target of the workspace (libraries,
//! binaries, examples, benches, build scripts) and fails on an import circle between the
//! files of one target, on a function over [`LIMIT`] lines that the document's allow-list
//! does not name, and on a crate dependency its table does not allow.

mod functions;
mod imports;
mod layers;
mod modules;

use std::path::{Path, PathBuf};

use modules::Target;

/// The longest a non-test function may be, in lines.
pub const LIMIT: usize = 120;

/// Runs every check on the workspace at `root`; the breaches, one message each.
pub fn run(root: &Path) -> Result<Vec<String>, String> {
    let doc = root.join("docs/architecture.md");
    let crates = layers::crates(root)?;
    let mut errors = layers::check(&crates, &doc)?;
    let allowed = allowed_long_functions(&doc)?;
    for c in &crates {
        for file in target_roots(&root.join(&c.folder)) {
            let target = Target::read(root, &file)?;
            errors.extend(circle_messages(&target));
            for long in functions::long_functions(&target, LIMIT) {
                let path = target.files[long.file].display().to_string();
                if !allowed.iter().any(|(p, n)| *p == path && *n == long.name) {
                    errors.push(format!(
                        "{path}:{}: `{}` is {} lines (at most {LIMIT})",
                        long.line, long.name, long.lines
                    ));
                }
            }
        }
    }
    Ok(errors)
}

fn circle_messages(target: &Target) -> Vec<String> {
    imports::circles(target)
        .into_iter()
        .map(|circle| {
            let edges: Vec<String> = circle
                .iter()
                .map(|(from, edge)| {
                    format!(
                        "  {}:{} imports {}",
                        target.files[*from].display(),
                        edge.line,
                        target.files[edge.to].display()
                    )
                })
                .collect();
            format!("import circle in {}:\n{}", target.name, edges.join("\n"))
        })
        .collect()
}

/// The root file of every build target in a crate's folder.
fn target_roots(folder: &Path) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["src/lib.rs", "src/main.rs", "build.rs"]
        .iter()
        .map(|f| folder.join(f))
        .filter(|f| f.is_file())
        .collect();
    for dir in ["src/bin", "examples", "benches"] {
        let Ok(entries) = std::fs::read_dir(folder.join(dir)) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter_map(|p| match p.is_dir() {
                true => Some(p.join("main.rs")).filter(|m| m.is_file()),
                false => Some(p).filter(|p| p.extension().is_some_and(|e| e == "rs")),
            })
            .collect();
        found.sort();
        roots.extend(found);
    }
    roots
}

/// The allow-list of `docs/architecture.md`'s "## Function length" section: lines of the
/// form ``- `path/to/file.rs` `name`: why``.
fn allowed_long_functions(doc: &Path) -> Result<Vec<(String, String)>, String> {
    let text = std::fs::read_to_string(doc).map_err(|e| format!("{}: {e}", doc.display()))?;
    let Some(section) = text
        .split("\n## ")
        .find(|s| s.starts_with("Function length"))
    else {
        return Err(format!(
            "{}: no section \"## Function length\"",
            doc.display()
        ));
    };
    Ok(section
        .lines()
        .filter(|l| l.starts_with("- `"))
        .filter_map(|l| {
            let mut ticked = l.split('`').skip(1).step_by(2);
            Some((ticked.next()?.to_string(), ticked.next()?.to_string()))
        })
        .collect())
}
