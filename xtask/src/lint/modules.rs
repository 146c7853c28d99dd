//! The module tree of one build target, read from its files: which file holds which module,
//! what each module defines and what its `use` declarations bring in, with test code left
//! out. Both the import-circle check and the function-length check walk this tree.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use syn::{Attribute, Item, UseTree};

/// One module: a file, or an inline `mod name { ... }` inside one.
pub struct Module {
    /// The path from the target's root, e.g. `["gang", "agent"]`.
    pub path: Vec<String>,
    /// Index into [`Target::files`].
    pub file: usize,
    /// Names defined here, child modules included.
    pub defined: Vec<String>,
    /// Each name a `use` brings in, to the path it names (relative paths left as written).
    pub imports: HashMap<String, Vec<String>>,
    /// The paths of `use path::*` declarations.
    pub globs: Vec<Vec<String>>,
    /// The non-test items, for the checks to visit.
    pub items: Vec<Item>,
}

/// One build target (a library, a binary, an example, a bench, a build script).
pub struct Target {
    /// Shown in messages, e.g. `client-proxy/src/lib.rs`.
    pub name: String,
    /// The files of the target, relative to the workspace root.
    pub files: Vec<PathBuf>,
    pub modules: Vec<Module>,
}

impl Target {
    /// Reads the target whose root file is `root`, following `mod name;` declarations.
    pub fn read(workspace: &Path, root: &Path) -> Result<Target, String> {
        let mut target = Target {
            name: display(workspace, root),
            files: Vec::new(),
            modules: Vec::new(),
        };
        target.read_file(workspace, root, Vec::new(), true)?;
        Ok(target)
    }

    /// The module at `path`, if the target has one.
    pub fn module(&self, path: &[String]) -> Option<&Module> {
        self.modules.iter().find(|m| m.path == path)
    }

    fn read_file(
        &mut self,
        workspace: &Path,
        file: &Path,
        path: Vec<String>,
        is_root: bool,
    ) -> Result<(), String> {
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("{}: cannot read: {e}", display(workspace, file)))?;
        let syntax = syn::parse_file(&text)
            .map_err(|e| format!("{}: cannot parse: {e}", display(workspace, file)))?;
        let index = self.files.len();
        self.files
            .push(file.strip_prefix(workspace).unwrap_or(file).to_path_buf());
        let dir = child_dir(file, is_root);
        self.add_module(workspace, &dir, index, path, syntax.items)
    }

    fn add_module(
        &mut self,
        workspace: &Path,
        dir: &Path,
        file: usize,
        path: Vec<String>,
        items: Vec<Item>,
    ) -> Result<(), String> {
        let mut module = Module {
            path: path.clone(),
            file,
            defined: Vec::new(),
            imports: HashMap::new(),
            globs: Vec::new(),
            items: Vec::new(),
        };
        let mut children = Vec::new();
        for item in items.into_iter().filter(|i| !is_test_item(i)) {
            if let Some(name) = defined_name(&item) {
                module.defined.push(name);
            }
            if let Item::Use(u) = &item {
                collect_use(&u.tree, Vec::new(), &mut module);
            }
            if let Item::Mod(m) = &item {
                children.push(m.clone());
            }
            module.items.push(item);
        }
        self.modules.push(module);
        for child in children {
            let mut child_path = path.clone();
            child_path.push(child.ident.to_string());
            match child.content {
                Some((_, inline)) => {
                    let inner = dir.join(child.ident.to_string());
                    self.add_module(workspace, &inner, file, child_path, inline)?;
                }
                None => {
                    let found = module_file(dir, &child.ident.to_string()).ok_or_else(|| {
                        format!("{}: no file for `mod {}`", dir.display(), child.ident)
                    })?;
                    self.read_file(workspace, &found, child_path, false)?;
                }
            }
        }
        Ok(())
    }
}

/// Whether an item is compiled only for tests: `#[cfg(test)]`, `#[test]`, `#[tokio::test]`.
pub fn is_test_item(item: &Item) -> bool {
    let attrs: &[Attribute] = match item {
        Item::Fn(f) => &f.attrs,
        Item::Mod(m) => &m.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Use(u) => &u.attrs,
        Item::Struct(s) => &s.attrs,
        Item::Enum(e) => &e.attrs,
        Item::Const(c) => &c.attrs,
        Item::Static(s) => &s.attrs,
        Item::Trait(t) => &t.attrs,
        Item::Type(t) => &t.attrs,
        Item::Macro(m) => &m.attrs,
        _ => return false,
    };
    is_test_attrs(attrs)
}

/// Whether attributes mark test-only code.
pub fn is_test_attrs(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| {
        let path = a.path();
        if path.is_ident("test") || path.segments.last().is_some_and(|s| s.ident == "test") {
            return true;
        }
        if path.is_ident("cfg") {
            let tokens = a.meta.require_list().map(|l| l.tokens.to_string());
            return tokens.is_ok_and(|t| t.trim() == "test");
        }
        false
    })
}

fn defined_name(item: &Item) -> Option<String> {
    let ident = match item {
        Item::Fn(f) => &f.sig.ident,
        Item::Mod(m) => &m.ident,
        Item::Struct(s) => &s.ident,
        Item::Enum(e) => &e.ident,
        Item::Const(c) => &c.ident,
        Item::Static(s) => &s.ident,
        Item::Trait(t) => &t.ident,
        Item::Type(t) => &t.ident,
        Item::Union(u) => &u.ident,
        Item::Macro(m) => m.ident.as_ref()?,
        _ => return None,
    };
    Some(ident.to_string())
}

fn collect_use(tree: &UseTree, prefix: Vec<String>, module: &mut Module) {
    match tree {
        UseTree::Path(p) => {
            let mut next = prefix;
            next.push(p.ident.to_string());
            collect_use(&p.tree, next, module);
        }
        UseTree::Name(n) => {
            let name = n.ident.to_string();
            let mut full = prefix;
            if name != "self" {
                full.push(name.clone());
            }
            let local = if name == "self" {
                full.last().cloned().unwrap_or_default()
            } else {
                name
            };
            module.imports.insert(local, full);
        }
        UseTree::Rename(r) => {
            let mut full = prefix;
            if r.ident != "self" {
                full.push(r.ident.to_string());
            }
            module.imports.insert(r.rename.to_string(), full);
        }
        UseTree::Glob(_) => module.globs.push(prefix),
        UseTree::Group(g) => {
            for t in &g.items {
                collect_use(t, prefix.clone(), module);
            }
        }
    }
}

/// Where the files of `file`'s child modules live: beside a crate root or a `mod.rs`, in a
/// folder named after the module otherwise.
fn child_dir(file: &Path, is_root: bool) -> PathBuf {
    let parent = file.parent().unwrap_or(Path::new(".")).to_path_buf();
    let stem = file
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    if is_root || stem == "mod" {
        parent
    } else {
        parent.join(stem)
    }
}

fn module_file(dir: &Path, name: &str) -> Option<PathBuf> {
    [
        dir.join(format!("{name}.rs")),
        dir.join(name).join("mod.rs"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// A path relative to the workspace, for messages.
pub fn display(workspace: &Path, file: &Path) -> String {
    file.strip_prefix(workspace)
        .unwrap_or(file)
        .display()
        .to_string()
}
