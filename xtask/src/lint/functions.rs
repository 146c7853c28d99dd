//! Function length: every non-test function, counted from its `fn` to its closing brace
//! (its doc comment and attributes not counted; closures and nested functions inside it
//! counted with it, and nested functions also on their own).

use syn::visit::Visit;

use super::modules::{Target, is_test_attrs, is_test_item};

/// One function over the limit.
pub struct LongFunction {
    pub file: usize,
    /// `name`, or `Type::name` for a method.
    pub name: String,
    pub line: usize,
    pub lines: usize,
}

/// Every non-test function of `target` longer than `limit` lines.
pub fn long_functions(target: &Target, limit: usize) -> Vec<LongFunction> {
    let mut found = Vec::new();
    for module in &target.modules {
        let mut visitor = Lengths {
            file: module.file,
            limit,
            owner: None,
            found: &mut found,
        };
        for item in &module.items {
            visitor.visit_item(item);
        }
    }
    found
}

struct Lengths<'a> {
    file: usize,
    limit: usize,
    /// The type of the `impl` or the trait being visited.
    owner: Option<String>,
    found: &'a mut Vec<LongFunction>,
}

impl Lengths<'_> {
    fn measure(&mut self, sig: &syn::Signature, block: &syn::Block) {
        let first = sig.fn_token.span.start().line;
        let last = block.brace_token.span.close().end().line;
        let lines = last.saturating_sub(first) + 1;
        if lines > self.limit {
            let name = match &self.owner {
                Some(owner) => format!("{owner}::{}", sig.ident),
                None => sig.ident.to_string(),
            };
            self.found.push(LongFunction {
                file: self.file,
                name,
                line: first,
                lines,
            });
        }
    }
}

impl<'ast> Visit<'ast> for Lengths<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !is_test_item(item) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {
        // An inline module is a module of its own in the tree, visited there.
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        let owner = self.owner.take();
        self.measure(&f.sig, &f.block);
        syn::visit::visit_item_fn(self, f);
        self.owner = owner;
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        let owner = self.owner.replace(type_name(&i.self_ty));
        syn::visit::visit_item_impl(self, i);
        self.owner = owner;
    }

    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        let owner = self.owner.replace(t.ident.to_string());
        syn::visit::visit_item_trait(self, t);
        self.owner = owner;
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test_attrs(&f.attrs) {
            self.measure(&f.sig, &f.block);
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let Some(block) = &f.default {
            self.measure(&f.sig, block);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }
}

fn type_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(p) => p
            .path
            .segments
            .last()
            .map_or_else(|| "_".to_string(), |s| s.ident.to_string()),
        _ => "_".to_string(),
    }
}
