//! Import circles between the files of one target. A file imports another when its non-test
//! code names an item the other file defines: through a `use`, or a path such as
//! `crate::a::B`, `super::f` or `child::g` (also inside macro calls). A path is followed
//! through re-exports (`pub use`) to the file that defines the item, so a crate root that
//! re-exports a name is not counted as the name's home, and a re-export is not an import of
//! the file that writes it. The target's root file (`lib.rs`, `main.rs`) is left out: it
//! declares every module, and what it defines is the crate's shared vocabulary. Files that import each other,
//! directly or around a ring, form a circle.

use std::collections::{BTreeMap, BTreeSet};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

use super::modules::{Module, Target};

/// One import found in a file: the file it reaches and the line that names it.
#[derive(Clone)]
pub struct Edge {
    pub to: usize,
    pub line: usize,
}

/// Every circle of `target`: each a list of files, with one import between members each.
pub fn circles(target: &Target) -> Vec<Vec<(usize, Edge)>> {
    let edges = file_edges(target);
    strongly_connected(target.files.len(), &edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|component| {
            let members: BTreeSet<usize> = component.iter().copied().collect();
            let mut shown = Vec::new();
            for &from in &component {
                for edge in edges.get(&from).into_iter().flat_map(|m| m.values()) {
                    if members.contains(&edge.to) {
                        shown.push((from, edge.clone()));
                    }
                }
            }
            shown
        })
        .collect()
}

/// From each file, the files it imports (the first line naming each).
fn file_edges(target: &Target) -> BTreeMap<usize, BTreeMap<usize, Edge>> {
    let mut edges: BTreeMap<usize, BTreeMap<usize, Edge>> = BTreeMap::new();
    for module in &target.modules {
        let mut refs = References::default();
        for item in &module.items {
            refs.visit_item(item);
        }
        for (path, line) in refs.paths {
            let Some(absolute) = absolute(target, module, &path) else {
                continue;
            };
            let Some(to) = home_file(target, &absolute, 0) else {
                continue;
            };
            // The root (file 0) is the target's table of contents, left out of the graph.
            if to != module.file && to != 0 && module.file != 0 {
                let from = edges.entry(module.file).or_default();
                from.entry(to).or_insert(Edge { to, line });
            }
        }
    }
    edges
}

/// A path as written in `module`, made absolute from the target's root; `None` when it
/// names something outside the target (another crate, a local variable).
fn absolute(target: &Target, module: &Module, path: &[String]) -> Option<Vec<String>> {
    absolute_within(target, module, path, 0)
}

fn absolute_within(
    target: &Target,
    module: &Module,
    path: &[String],
    depth: usize,
) -> Option<Vec<String>> {
    let first = path.first()?;
    if depth > 8 {
        return None;
    }
    match first.as_str() {
        "crate" => Some(path[1..].to_vec()),
        "self" => Some(join(&module.path, &path[1..])),
        "super" => {
            let mut base = module.path.clone();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
            Some(join(&base, rest))
        }
        _ if target.module(&join(&module.path, &path[..1])).is_some() => {
            Some(join(&module.path, path))
        }
        _ => {
            let imported = module.imports.get(first)?;
            if imported.first().is_some_and(|s| s == first) && imported.len() == 1 {
                return None;
            }
            let mut full = imported.clone();
            full.extend_from_slice(&path[1..]);
            absolute_within(target, module, &full, depth + 1)
        }
    }
}

/// The file that defines what `path` names, following re-exports and glob imports.
fn home_file(target: &Target, path: &[String], depth: usize) -> Option<usize> {
    if depth > 8 {
        return None;
    }
    let mut module = target.module(&[])?;
    for (i, segment) in path.iter().enumerate() {
        let mut next = module.path.clone();
        next.push(segment.clone());
        if let Some(child) = target.module(&next) {
            module = child;
            continue;
        }
        if module.defined.contains(segment) {
            return Some(module.file);
        }
        if let Some(imported) = module.imports.get(segment) {
            let mut rest = imported.clone();
            rest.extend_from_slice(&path[i + 1..]);
            let resolved = absolute(target, module, &rest)?;
            return home_file(target, &resolved, depth + 1);
        }
        for glob in &module.globs {
            let mut candidate = glob.clone();
            candidate.extend_from_slice(&path[i..]);
            if let Some(resolved) = absolute(target, module, &candidate)
                && let Some(file) = home_file(target, &resolved, depth + 1)
            {
                return Some(file);
            }
        }
        return Some(module.file);
    }
    Some(module.file)
}

fn join(base: &[String], rest: &[String]) -> Vec<String> {
    base.iter().chain(rest).cloned().collect()
}

/// Every path the visited code writes, with its line.
#[derive(Default)]
struct References {
    paths: Vec<(Vec<String>, usize)>,
}

impl<'ast> Visit<'ast> for References {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !super::modules::is_test_item(item) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {
        // An inline module is a module of its own in the tree, visited there.
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !super::modules::is_test_attrs(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {
        // `pub(super)` and `pub(in path)` name where an item is seen, not what it uses.
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        // A re-export (`pub use`) is the module's public face, not an import of its own:
        // paths are followed through it to the defining file instead.
        if !matches!(u.vis, syn::Visibility::Inherited) {
            return;
        }
        let line = u.use_token.span.start().line;
        self.use_tree(&u.tree, Vec::new(), line);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if let Some(first) = path.segments.first() {
            self.paths.push((segments, first.ident.span().start().line));
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        self.token_paths(mac.tokens.clone());
    }
}

impl References {
    fn use_tree(&mut self, tree: &syn::UseTree, prefix: Vec<String>, line: usize) {
        match tree {
            syn::UseTree::Path(p) => {
                let mut next = prefix;
                next.push(p.ident.to_string());
                self.use_tree(&p.tree, next, line);
            }
            syn::UseTree::Name(n) => {
                let mut full = prefix;
                if n.ident != "self" {
                    full.push(n.ident.to_string());
                }
                self.paths.push((full, line));
            }
            syn::UseTree::Rename(r) => {
                let mut full = prefix;
                if r.ident != "self" {
                    full.push(r.ident.to_string());
                }
                self.paths.push((full, line));
            }
            syn::UseTree::Glob(_) => self.paths.push((prefix, line)),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(t, prefix.clone(), line);
                }
            }
        }
    }

    /// Paths inside a macro's tokens (`format!`, `tokio::select!` bodies are not parsed):
    /// every run of `ident :: ident ...`, and single idents a `use` may have brought in.
    fn token_paths(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < trees.len() {
            match &trees[i] {
                TokenTree::Group(g) => self.token_paths(g.stream()),
                TokenTree::Ident(first) => {
                    let line = first.span().start().line;
                    let mut path = vec![first.to_string()];
                    while let (
                        Some(TokenTree::Punct(a)),
                        Some(TokenTree::Punct(b)),
                        Some(TokenTree::Ident(next)),
                    ) = (trees.get(i + 1), trees.get(i + 2), trees.get(i + 3))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        path.push(next.to_string());
                        i += 3;
                    }
                    self.paths.push((path, line));
                }
                _ => {}
            }
            i += 1;
        }
    }
}

/// Tarjan's algorithm, iteratively: the strongly connected components of the file graph.
fn strongly_connected(n: usize, edges: &BTreeMap<usize, BTreeMap<usize, Edge>>) -> Vec<Vec<usize>> {
    let successors = |v: usize| -> Vec<usize> {
        edges
            .get(&v)
            .map(|m| m.keys().copied().collect())
            .unwrap_or_default()
    };
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut components = Vec::new();
    let mut next = 0;
    for start in 0..n {
        if index[start] != usize::MAX {
            continue;
        }
        let mut work = vec![(start, successors(start), 0usize)];
        index[start] = next;
        low[start] = next;
        next += 1;
        stack.push(start);
        on_stack[start] = true;
        while let Some((v, succ, pos)) = work.last_mut() {
            let v = *v;
            if let Some(&w) = succ.get(*pos) {
                *pos += 1;
                if index[w] == usize::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    work.push((w, successors(w), 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some((parent, _, _)) = work.last() {
                low[*parent] = low[*parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                components.push(component);
            }
        }
    }
    components
}
