//! Crate layering: the dependencies each crate's `Cargo.toml` declares on the workspace's
//! own crates, held against the table of `docs/architecture.md` ("Crate dependencies"),
//! which gives each crate (by folder) its layer, what it may depend on and what its tests
//! may also use. A dependency the table does not list, one on a crate of a higher layer, and
//! a crate the table leaves out are all errors.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One crate of the workspace, as its manifest declares it.
pub struct Crate {
    /// The folder, e.g. `client-proxy`; the table names crates by it.
    pub folder: String,
    pub package: String,
    /// Workspace packages under `[dependencies]` and `[build-dependencies]`.
    pub normal: BTreeSet<String>,
    /// Workspace packages under `[dev-dependencies]`.
    pub dev: BTreeSet<String>,
}

/// One row of the architecture table.
struct Row {
    layer: u32,
    depends: BTreeSet<String>,
    tests: BTreeSet<String>,
}

/// Reads the members of the workspace at `root`.
pub fn crates(root: &Path) -> Result<Vec<Crate>, String> {
    let manifest = read_toml(&root.join("Cargo.toml"))?;
    let members: Vec<String> = manifest
        .get("workspace")
        .and_then(|w| w.get("members"))
        .and_then(|m| m.as_array())
        .ok_or("Cargo.toml: no [workspace] members")?
        .iter()
        .filter_map(|m| m.as_str().map(str::to_string))
        .collect();
    let mut tables = Vec::new();
    for folder in &members {
        tables.push((
            folder.clone(),
            read_toml(&root.join(folder).join("Cargo.toml"))?,
        ));
    }
    let packages: BTreeSet<String> = tables.iter().filter_map(|(_, t)| package_name(t)).collect();
    let mut crates = Vec::new();
    for (folder, table) in &tables {
        crates.push(Crate {
            folder: folder.clone(),
            package: package_name(table).unwrap_or_else(|| folder.clone()),
            normal: own_dependencies(table, &["dependencies", "build-dependencies"], &packages),
            dev: own_dependencies(table, &["dev-dependencies"], &packages),
        });
    }
    Ok(crates)
}

/// Every breach of the architecture table at `doc` by `crates`.
pub fn check(crates: &[Crate], doc: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(doc).map_err(|e| format!("{}: {e}", doc.display()))?;
    let rows = table(&text).map_err(|e| format!("{}: {e}", doc.display()))?;
    let folder_of: BTreeMap<&str, &str> = crates
        .iter()
        .map(|c| (c.package.as_str(), c.folder.as_str()))
        .collect();
    let mut errors = Vec::new();
    for c in crates {
        let Some(row) = rows.get(&c.folder) else {
            errors.push(format!("crate `{}` is missing from the table", c.folder));
            continue;
        };
        for (package, dev) in c
            .normal
            .iter()
            .map(|p| (p, false))
            .chain(c.dev.iter().map(|p| (p, true)))
        {
            let folder = folder_of.get(package.as_str()).copied().unwrap_or(package);
            let listed = row.depends.contains(folder) || (dev && row.tests.contains(folder));
            let what = if dev { "its tests use" } else { "depends on" };
            if !listed {
                errors.push(format!(
                    "`{}` {what} `{folder}`, which the table does not allow",
                    c.folder
                ));
            }
            let above = rows.get(folder).is_some_and(|r| r.layer > row.layer);
            if above && !dev {
                errors.push(format!(
                    "`{}` (layer {}) depends on `{folder}`, a crate of a higher layer",
                    c.folder, row.layer
                ));
            }
        }
    }
    Ok(errors)
}

/// The rows of the table under the heading "## Crate dependencies": `| folder | layer |
/// depends on | its tests also use |`, crates in backticks.
fn table(text: &str) -> Result<BTreeMap<String, Row>, String> {
    let section = text
        .split("\n## ")
        .find(|s| s.starts_with("Crate dependencies"))
        .ok_or("no section \"## Crate dependencies\"")?;
    let mut rows = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let [folder, layer, depends, tests] = cells[..] else {
            return Err(format!("a row without four cells: {line}"));
        };
        let layer = layer
            .parse()
            .map_err(|_| format!("layer `{layer}` is not a number: {line}"))?;
        let names = |cell: &str| ticked(cell).into_iter().collect::<BTreeSet<_>>();
        let folder = ticked(folder).into_iter().next().unwrap_or_default();
        rows.insert(
            folder,
            Row {
                layer,
                depends: names(depends),
                tests: names(tests),
            },
        );
    }
    Ok(rows)
}

/// The `backticked` words of a cell.
fn ticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

fn read_toml(path: &Path) -> Result<toml::Table, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.parse().map_err(|e| format!("{}: {e}", path.display()))
}

fn package_name(table: &toml::Table) -> Option<String> {
    Some(table.get("package")?.get("name")?.as_str()?.to_string())
}

/// The workspace packages a manifest lists under `sections`, also per target
/// (`[target.'cfg(..)'.dependencies]`), by package name even when renamed.
fn own_dependencies(
    table: &toml::Table,
    sections: &[&str],
    own: &BTreeSet<String>,
) -> BTreeSet<String> {
    let mut tables: Vec<&toml::Table> = sections
        .iter()
        .filter_map(|s| table.get(*s).and_then(|d| d.as_table()))
        .collect();
    if let Some(targets) = table.get("target").and_then(|t| t.as_table()) {
        for t in targets.values().filter_map(|t| t.as_table()) {
            tables.extend(
                sections
                    .iter()
                    .filter_map(|s| t.get(*s).and_then(|d| d.as_table())),
            );
        }
    }
    let mut found = BTreeSet::new();
    for deps in tables {
        for (key, value) in deps {
            let package = value
                .get("package")
                .and_then(|p| p.as_str())
                .unwrap_or(key)
                .to_string();
            if own.contains(&package) {
                found.insert(package);
            }
        }
    }
    found
}
