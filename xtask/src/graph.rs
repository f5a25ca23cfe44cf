//! A crate's file-level import graph, built from its parsed source.
//!
//! Nodes are the `.rs` files of the module tree. An edge A -> B is a path
//! written in A (a `use`, or a path in code, macro bodies and tests
//! included) that resolves into B. Resolution follows Rust's name lookup
//! as far as a file graph needs it: `crate::`, `self::`, `super::` and
//! names in scope (child modules, items, `use` bindings and globs, which
//! are followed to where they come from, so a re-export is no edge to the
//! file that re-exports). A path that stops at an item, or at a name the
//! module does not have, lands in that module's file. A name bound to
//! another crate is that crate's.
//!
//! The module tree is kept beside it (each file's module, each module's
//! name and parent), and so are the re-exports that are no edge here, for
//! the module-level check in `main.rs`, which groups files by module.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::{self, Visit};

/// Where a path leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Into these files of the crate (several: cfg alternatives).
    Files(BTreeSet<usize>),
    /// Into another crate.
    Extern(String),
}

/// A path written in a file.
#[derive(Debug, Clone)]
pub struct Ref {
    pub segs: Vec<String>,
    /// The module whose scope it is written in.
    pub module: usize,
    pub line: usize,
    /// Inside `#[cfg(test)]` code.
    pub test: bool,
}

/// A `use` that others see (`pub use`, `pub(crate) use`): part of the
/// module's facade, no dependency of its own unless the file also uses the
/// name it binds.
#[derive(Debug, Clone)]
struct Facade {
    name: String,
    at: usize,
}

#[derive(Debug, Default)]
pub struct Module {
    /// Its name in its parent (empty for the crate root).
    pub name: String,
    pub parent: Option<usize>,
    pub files: BTreeSet<usize>,
    children: BTreeMap<String, usize>,
    /// Items defined, each with the files that define it (two for an item
    /// of a module with cfg alternatives).
    items: BTreeMap<String, BTreeSet<usize>>,
    /// Names bound by `use`, each to the path it was written with.
    uses: BTreeMap<String, Vec<Vec<String>>>,
    globs: Vec<Vec<String>>,
}

#[derive(Debug)]
pub struct File {
    pub path: PathBuf,
    /// The module whose file it is (the `mod x;` that loads it); inline
    /// modules written in it are part of it.
    pub module: usize,
    pub refs: Vec<Ref>,
    /// The paths of its re-exports (`pub use`) that the file does not use
    /// itself: no edge of the file graph, part of the module's face.
    pub reexports: Vec<Ref>,
    /// Reached only through a `#[cfg(test)]` module.
    pub test: bool,
}

#[derive(Debug, Default)]
pub struct Crate {
    pub modules: Vec<Module>,
    pub files: Vec<File>,
}

/// One edge: the first line of `from` that leads into `to`, and whether
/// only test code does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    pub line: usize,
    pub test_only: bool,
}

impl Crate {
    /// Parses the crate whose root file is `root` (`src/lib.rs`).
    pub fn load(root: &Path) -> Result<Crate, String> {
        let mut krate = Crate::default();
        krate.modules.push(Module::default());
        krate.load_file(root, 0, true, false)?;
        Ok(krate)
    }

    fn load_file(
        &mut self,
        path: &Path,
        module: usize,
        owns_dir: bool,
        test: bool,
    ) -> Result<(), String> {
        let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let file = syn::parse_file(&text).map_err(|e| {
            let at = e.span().start();
            format!("{}:{}: {e}", path.display(), at.line)
        })?;
        let id = self.files.len();
        self.files.push(File {
            path: path.to_path_buf(),
            module,
            refs: Vec::new(),
            reexports: Vec::new(),
            test,
        });
        self.modules[module].files.insert(id);
        let dir = if owns_dir {
            path.parent().unwrap().to_path_buf()
        } else {
            path.with_extension("")
        };
        let base = path.parent().unwrap().to_path_buf();
        self.load_items(&file.items, id, module, &dir, &base, false, test)?;
        let mut refs = Refs {
            krate: self,
            module,
            test,
            facade: None,
            out: Vec::new(),
            facades: Vec::new(),
            names: BTreeSet::new(),
        };
        refs.visit_file(&file);
        let Refs {
            out,
            facades,
            names,
            ..
        } = refs;
        // A re-export counts only if the file uses the name itself; the
        // others are kept apart, for the module-level check.
        let (refs, reexports) = out.into_iter().enumerate().partition(|(i, _)| {
            facades
                .iter()
                .find(|f| f.at == *i)
                .is_none_or(|f| names.contains(&f.name))
        });
        let unzip = |v: Vec<(usize, Ref)>| v.into_iter().map(|(_, r)| r).collect();
        self.files[id].refs = unzip(refs);
        self.files[id].reexports = unzip(reexports);
        Ok(())
    }

    /// Records the items of a module (a file's, or an inline module's)
    /// and loads the files of its child modules.
    #[allow(clippy::too_many_arguments)]
    fn load_items(
        &mut self,
        items: &[syn::Item],
        file: usize,
        module: usize,
        dir: &Path,
        base: &Path,
        inline: bool,
        test: bool,
    ) -> Result<(), String> {
        for item in items {
            let name = match item {
                syn::Item::Mod(m) => {
                    let name = m.ident.to_string();
                    let child = match self.modules[module].children.get(&name) {
                        Some(&c) => c,
                        None => {
                            self.modules.push(Module {
                                name: name.clone(),
                                parent: Some(module),
                                ..Module::default()
                            });
                            let c = self.modules.len() - 1;
                            self.modules[module].children.insert(name.clone(), c);
                            c
                        }
                    };
                    let test = test || is_cfg_test(&m.attrs);
                    match &m.content {
                        Some((_, items)) => {
                            self.modules[child].files.insert(file);
                            let sub = dir.join(&name);
                            self.load_items(items, file, child, &sub, &sub, true, test)?;
                        }
                        None => {
                            let (path, owns_dir) = match path_attr(&m.attrs) {
                                // Relative to the file's own directory
                                // (to the module's, inside an inline one).
                                Some(p) => (if inline { dir } else { base }.join(p), true),
                                None => {
                                    let flat = dir.join(format!("{name}.rs"));
                                    if flat.exists() {
                                        (flat, false)
                                    } else {
                                        (dir.join(&name).join("mod.rs"), true)
                                    }
                                }
                            };
                            self.load_file(&path, child, owns_dir, test)?;
                        }
                    }
                    continue;
                }
                syn::Item::Use(u) => {
                    let mut prefix = Vec::new();
                    if u.leading_colon.is_some() {
                        prefix.push("::".to_string());
                    }
                    self.bind_use(module, &u.tree, &mut prefix);
                    continue;
                }
                syn::Item::Fn(f) => f.sig.ident.to_string(),
                syn::Item::Struct(s) => s.ident.to_string(),
                syn::Item::Enum(e) => e.ident.to_string(),
                syn::Item::Union(u) => u.ident.to_string(),
                syn::Item::Trait(t) => t.ident.to_string(),
                syn::Item::TraitAlias(t) => t.ident.to_string(),
                syn::Item::Type(t) => t.ident.to_string(),
                syn::Item::Const(c) => c.ident.to_string(),
                syn::Item::Static(s) => s.ident.to_string(),
                syn::Item::Macro(m) => match &m.ident {
                    Some(i) => i.to_string(),
                    None => continue,
                },
                _ => continue,
            };
            self.modules[module]
                .items
                .entry(name)
                .or_default()
                .insert(file);
        }
        Ok(())
    }

    fn bind_use(&mut self, module: usize, tree: &syn::UseTree, prefix: &mut Vec<String>) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.bind_use(module, &p.tree, prefix);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let name = n.ident.to_string();
                let mut path = prefix.clone();
                if name == "self" {
                    let Some(last) = prefix.last() else { return };
                    let bound = last.clone();
                    self.bind(module, bound, path);
                } else {
                    path.push(name.clone());
                    self.bind(module, name, path);
                }
            }
            syn::UseTree::Rename(r) => {
                let mut path = prefix.clone();
                if r.ident != "self" {
                    path.push(r.ident.to_string());
                }
                self.bind(module, r.rename.to_string(), path);
            }
            syn::UseTree::Glob(_) => self.modules[module].globs.push(prefix.clone()),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.bind_use(module, t, prefix);
                }
            }
        }
    }

    fn bind(&mut self, module: usize, name: String, path: Vec<String>) {
        if name == "_" {
            return;
        }
        self.modules[module]
            .uses
            .entry(name)
            .or_default()
            .push(path);
    }

    /// Where `segs`, written in `module`, leads.
    pub fn resolve(&self, module: usize, segs: &[String]) -> Option<Target> {
        self.resolve_at(module, segs, 0)
    }

    fn resolve_at(&self, module: usize, segs: &[String], hops: usize) -> Option<Target> {
        // A chain of re-exports this long is a loop (a glob importing
        // itself): stop where it is.
        if hops > 32 {
            return Some(self.files_of(module));
        }
        let (first, rest) = segs.split_first()?;
        match first.as_str() {
            "::" => {
                let (name, _) = rest.split_first()?;
                Some(Target::Extern(name.clone()))
            }
            "crate" => Some(self.walk(0, rest, hops)),
            "self" => Some(self.walk(module, rest, hops)),
            "super" => {
                let mut m = module;
                let mut rest = segs;
                while let Some(("super", r)) = rest.split_first().map(|(f, r)| (f.as_str(), r)) {
                    m = self.modules[m].parent?;
                    rest = r;
                }
                Some(self.walk(m, rest, hops))
            }
            "Self" => None,
            _ => match self.lookup(module, first, rest, hops) {
                Some(t) => Some(t),
                // Not in scope: another crate (or a prelude name).
                None => Some(Target::Extern(first.clone())),
            },
        }
    }

    /// `name` (followed by `rest`) looked up in `module`'s scope: `None` if
    /// the module has no such name.
    fn lookup(&self, module: usize, name: &str, rest: &[String], hops: usize) -> Option<Target> {
        let m = &self.modules[module];
        if let Some(&child) = m.children.get(name) {
            return Some(self.walk(child, rest, hops));
        }
        if let Some(files) = m.items.get(name) {
            return Some(Target::Files(files.clone()));
        }
        if let Some(paths) = m.uses.get(name) {
            let mut files = BTreeSet::new();
            let mut ext = None;
            for p in paths {
                let mut full = p.clone();
                full.extend(rest.iter().cloned());
                match self.resolve_at(module, &full, hops + 1) {
                    Some(Target::Files(f)) => files.extend(f),
                    Some(Target::Extern(e)) => ext = Some(e),
                    None => {}
                }
            }
            return match (files.is_empty(), ext) {
                (false, _) => Some(Target::Files(files)),
                (true, Some(e)) => Some(Target::Extern(e)),
                (true, None) => None,
            };
        }
        for glob in &m.globs {
            let Some(Target::Files(_)) = self.resolve_at(module, glob, hops + 1) else {
                continue;
            };
            if let Some(target) = self.module_at(module, glob, hops + 1)
                && target != module
                && let Some(t) = self.lookup(target, name, rest, hops + 1)
            {
                return Some(t);
            }
        }
        None
    }

    /// The module a path names, if it names one of this crate's.
    fn module_at(&self, module: usize, segs: &[String], hops: usize) -> Option<usize> {
        if hops > 32 {
            return None;
        }
        let (first, rest) = segs.split_first()?;
        let mut m = match first.as_str() {
            "crate" => 0,
            "self" => module,
            "super" => self.modules[module].parent?,
            name => {
                let here = &self.modules[module];
                if let Some(&c) = here.children.get(name) {
                    c
                } else {
                    let p = here.uses.get(name)?.first()?;
                    return self.module_at(module, p, hops + 1).and_then(|m| {
                        rest.iter()
                            .try_fold(m, |m, s| self.modules[m].children.get(s).copied())
                    });
                }
            }
        };
        for s in rest {
            m = match s.as_str() {
                "super" => self.modules[m].parent?,
                _ => *self.modules[m].children.get(s)?,
            };
        }
        Some(m)
    }

    fn walk(&self, mut module: usize, segs: &[String], hops: usize) -> Target {
        for (i, seg) in segs.iter().enumerate() {
            let rest = &segs[i + 1..];
            if seg == "super" {
                match self.modules[module].parent {
                    Some(p) => {
                        module = p;
                        continue;
                    }
                    None => break,
                }
            }
            if let Some(&child) = self.modules[module].children.get(seg) {
                module = child;
                continue;
            }
            if let Some(files) = self.modules[module].items.get(seg) {
                return Target::Files(files.clone());
            }
            return self
                .lookup(module, seg, rest, hops)
                .unwrap_or_else(|| self.files_of(module));
        }
        self.files_of(module)
    }

    fn files_of(&self, module: usize) -> Target {
        Target::Files(self.modules[module].files.clone())
    }

    /// Every edge between two files, keyed (from, to).
    pub fn edges(&self) -> BTreeMap<(usize, usize), Edge> {
        self.edges_of(|f| &f.refs)
    }

    /// The edges the files' unused re-exports would make, keyed (from, to).
    pub fn reexport_edges(&self) -> BTreeMap<(usize, usize), Edge> {
        self.edges_of(|f| &f.reexports)
    }

    fn edges_of(&self, refs: impl Fn(&File) -> &[Ref]) -> BTreeMap<(usize, usize), Edge> {
        let mut edges: BTreeMap<(usize, usize), Edge> = BTreeMap::new();
        for (from, file) in self.files.iter().enumerate() {
            for r in refs(file) {
                let Some(Target::Files(to)) = self.resolve(r.module, &r.segs) else {
                    continue;
                };
                if to.contains(&from) {
                    // Its own item, in a module with cfg alternatives: the
                    // other file defines the same for another build.
                    continue;
                }
                for to in to {
                    if to == from {
                        continue;
                    }
                    let e = edges.entry((from, to)).or_insert(Edge {
                        line: r.line,
                        test_only: r.test,
                    });
                    if !r.test && e.test_only {
                        *e = Edge {
                            line: r.line,
                            test_only: false,
                        };
                    }
                }
            }
        }
        edges
    }

    /// `module` and its ancestors, the crate root first.
    pub fn ancestry(&self, module: usize) -> Vec<usize> {
        let mut chain = vec![module];
        while let Some(p) = self.modules[*chain.last().unwrap()].parent {
            chain.push(p);
        }
        chain.reverse();
        chain
    }

    /// The module's path from the crate root: `crate`, `crate::hub::engine`.
    pub fn module_path(&self, module: usize) -> String {
        let mut path = "crate".to_string();
        for m in self.ancestry(module).into_iter().skip(1) {
            path.push_str("::");
            path.push_str(&self.modules[m].name);
        }
        path
    }

    /// The file's path relative to `root`, for messages.
    pub fn name(&self, file: usize, root: &Path) -> String {
        let p = &self.files[file].path;
        p.strip_prefix(root).unwrap_or(p).display().to_string()
    }
}

fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| {
        if !a.path().is_ident("path") {
            return None;
        }
        let syn::Meta::NameValue(nv) = &a.meta else {
            return None;
        };
        match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        }
    })
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("test")
            || (a.path().is_ident("cfg")
                && a.meta
                    .require_list()
                    .is_ok_and(|l| needs_test(l.tokens.clone())))
    })
}

/// Whether a cfg predicate holds only under `test`: `test` named in it,
/// not under a `not(..)`.
fn needs_test(tokens: TokenStream) -> bool {
    let mut trees = tokens.into_iter().peekable();
    while let Some(t) = trees.next() {
        match t {
            TokenTree::Ident(i) if i == "not" => {
                trees.next();
            }
            TokenTree::Ident(i) if i == "test" => return true,
            TokenTree::Group(g) if needs_test(g.stream()) => return true,
            _ => {}
        }
    }
    false
}

/// Collects the paths of one file, each with the module it is written in.
struct Refs<'a> {
    krate: &'a Crate,
    module: usize,
    test: bool,
    /// Inside a `use` that others see.
    facade: Option<()>,
    out: Vec<Ref>,
    /// Which of `out` come from a re-export, and the name each binds.
    facades: Vec<Facade>,
    /// First segments of the paths written in code: the names the file
    /// uses itself.
    names: BTreeSet<String>,
}

impl Refs<'_> {
    fn push(&mut self, segs: Vec<String>, line: usize) {
        // A bare name is no edge of its own: its `use` is.
        if segs.len() < 2
            && !matches!(
                segs.first().map(String::as_str),
                Some("crate" | "self" | "super")
            )
        {
            return;
        }
        self.out.push(Ref {
            segs,
            module: self.module,
            line,
            test: self.test,
        });
    }

    fn use_tree(&mut self, tree: &syn::UseTree, prefix: &mut Vec<String>) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(&p.tree, prefix);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut segs = prefix.clone();
                if n.ident != "self" {
                    segs.push(n.ident.to_string());
                }
                let bound = segs.last().cloned();
                let line = n.ident.span().start().line;
                self.push_use(segs, bound, line);
            }
            syn::UseTree::Rename(r) => {
                let mut segs = prefix.clone();
                if r.ident != "self" {
                    segs.push(r.ident.to_string());
                }
                let line = r.ident.span().start().line;
                self.push_use(segs, Some(r.rename.to_string()), line);
            }
            syn::UseTree::Glob(g) => {
                let line = g.star_token.spans[0].start().line;
                // A glob re-export binds every name: a dependency only if
                // the file uses one of them, which it cannot tell; none.
                let bound = self.facade.map(|()| "*".to_string());
                self.push_use(prefix.clone(), bound, line);
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(t, prefix);
                }
            }
        }
    }

    fn push_use(&mut self, segs: Vec<String>, bound: Option<String>, line: usize) {
        if segs.is_empty() {
            return;
        }
        if let (Some(()), Some(name)) = (self.facade, bound) {
            self.facades.push(Facade {
                name,
                at: self.out.len(),
            });
        }
        self.out.push(Ref {
            segs,
            module: self.module,
            line,
            test: self.test,
        });
    }

    /// Paths in a macro's tokens (`a::b::c`), which syn leaves unparsed.
    fn tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < trees.len() {
            if let TokenTree::Group(g) = &trees[i] {
                self.tokens(g.stream());
                i += 1;
                continue;
            }
            let TokenTree::Ident(first) = &trees[i] else {
                i += 1;
                continue;
            };
            self.names.insert(first.to_string());
            let line = first.span().start().line;
            let mut segs = vec![first.to_string()];
            let mut j = i + 1;
            while let (
                Some(TokenTree::Punct(a)),
                Some(TokenTree::Punct(b)),
                Some(TokenTree::Ident(n)),
            ) = (trees.get(j), trees.get(j + 1), trees.get(j + 2))
            {
                if a.as_char() != ':' || b.as_char() != ':' {
                    break;
                }
                segs.push(n.to_string());
                j += 3;
            }
            if segs.len() > 1 {
                self.push(segs, line);
            }
            i = j.max(i + 1);
        }
    }
}

impl<'ast> Visit<'ast> for Refs<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        let Some((_, items)) = &m.content else {
            return;
        };
        let name = m.ident.to_string();
        let Some(&child) = self.krate.modules[self.module].children.get(&name) else {
            return;
        };
        let (module, test) = (self.module, self.test);
        self.module = child;
        self.test |= is_cfg_test(&m.attrs);
        for item in items {
            self.visit_item(item);
        }
        (self.module, self.test) = (module, test);
    }

    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs: &[syn::Attribute] = match item {
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Use(u) => &u.attrs,
            syn::Item::Const(c) => &c.attrs,
            syn::Item::Static(s) => &s.attrs,
            syn::Item::Struct(s) => &s.attrs,
            syn::Item::Enum(e) => &e.attrs,
            syn::Item::Macro(m) => &m.attrs,
            _ => &[],
        };
        let test = self.test;
        self.test |= is_cfg_test(attrs);
        visit::visit_item(self, item);
        self.test = test;
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut prefix = Vec::new();
        if u.leading_colon.is_some() {
            prefix.push("::".to_string());
        }
        self.facade = match u.vis {
            syn::Visibility::Inherited => None,
            _ => Some(()),
        };
        self.use_tree(&u.tree, &mut prefix);
        self.facade = None;
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if let Some(first) = p.segments.first() {
            self.names.insert(first.ident.to_string());
        }
        let mut segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if p.leading_colon.is_some() {
            segs.insert(0, "::".to_string());
        }
        let line = p
            .segments
            .first()
            .map_or(0, |s| s.ident.span().start().line);
        self.push(segs, line);
        visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.visit_path(&m.path);
        self.tokens(m.tokens.clone());
    }

    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {
        // Doc comments and attributes name no dependency.
    }

    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {
        // `pub(crate)`, `pub(in crate::x)`: who may see, not a dependency.
    }
}

/// The strongly connected components of more than one file (Tarjan).
pub fn circles(n: usize, edges: &BTreeMap<(usize, usize), Edge>) -> Vec<Vec<usize>> {
    let mut adj = vec![Vec::new(); n];
    for &(a, b) in edges.keys() {
        adj[a].push(b);
    }
    struct T<'a> {
        adj: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn strong(t: &mut T<'_>, v: usize) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on[v] = true;
        for &w in &t.adj[v] {
            match t.index[w] {
                None => {
                    strong(t, w);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(i) if t.on[w] => t.low[v] = t.low[v].min(i),
                Some(_) => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on[w] = false;
                comp.push(w);
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort_unstable();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        adj: &adj,
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            strong(&mut t, v);
        }
    }
    t.out.sort();
    t.out
}
