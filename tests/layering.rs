//! The import graph, checked: no import cycle between the modules of any crate of the workspace or of the
//! binary, and ARCHITECTURE.md's layering: which crate may use which, and in the binary, subcommands (`src/cmd/`)
//! do not import each other, nothing but `main.rs` imports a subcommand, and nothing imports from `main.rs`.
//!
//! The graph is read from the source (`layering/source.rs`): an edge from a module to every module one of its paths
//! names. A module and its own submodules are one unit to the rest: a child using its parent's items, or a parent
//! its child's, is how one module is split into files, not a cycle. So a cycle is one between siblings — each taken
//! with its submodules — at any depth of the module tree; every one found is printed with the lines that make it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

#[path = "layering/source.rs"]
mod source;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each crate of the workspace: its package name, its source root, and the workspace crates its library code may
/// use (ARCHITECTURE.md: the engine is pure, the proxy and the sandbox do not know each other).
const CRATES: &[(&str, &str, &[&str])] = &[
    ("leash", "src/main.rs", &["leash-docker", "leash-policy", "leash-proxy", "leash-sandbox"]),
    ("leash-docker", "crates/leash-docker/src/lib.rs", &["leash-policy", "leash-proxy", "leash-sandbox"]),
    ("leash-policy", "crates/leash-policy/src/lib.rs", &[]),
    ("leash-proxy", "crates/leash-proxy/src/lib.rs", &["leash-policy"]),
    ("leash-sandbox", "crates/leash-sandbox/src/lib.rs", &[]),
];

#[test]
fn no_import_cycle_and_the_layering_holds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut problems = Vec::new();
    for &(name, lib, allowed) in CRATES {
        let graph = Graph::read(root, &root.join(lib));
        problems.extend(graph.cycles().into_iter().map(|c| format!("{name}: import cycle {c}")));
        problems.extend(crate_dependencies(root, name, lib, allowed, &graph));
        if name == "leash" {
            problems.extend(subcommand_rules(&graph));
        }
    }
    assert!(problems.is_empty(), "the import graph breaks ARCHITECTURE.md's rules:\n{}", problems.join("\n"));
}

/// The cycle finder finds what it should: a pair of siblings, a cycle through a sibling's submodule, and none
/// between a parent and its child.
#[test]
fn the_cycle_finder_finds_sibling_cycles_only() {
    let mut graph = Graph { files: BTreeMap::new(), edges: BTreeMap::new() };
    let module = |s: &str| s.split('/').filter(|p| !p.is_empty()).map(String::from).collect::<Vec<_>>();
    let mut edge = |from: &str, to: &str| graph.edges.insert((module(from), module(to)), format!("{from} -> {to}"));
    edge("a", "b");
    edge("b/inner", "a");
    edge("c", "c/child");
    edge("c/child", "c");
    edge("c/x", "c/y");
    edge("c/y/z", "c/x");
    edge("d", "");
    let cycles = graph.cycles();
    assert_eq!(cycles.len(), 2, "{cycles:#?}");
    assert!(cycles[0].starts_with("`a` ↔ `b`"), "{cycles:#?}");
    assert!(cycles[1].starts_with("`c/x` ↔ `c/y`"), "{cycles:#?}");
}

/// The reader sees use trees and inline paths, and neither comments, literals nor test-only items.
#[test]
fn the_reader_takes_paths_from_code_only() {
    let text = r##"
        use crate::{a::B, c::{self, d::*}, e as f};
        use super::g;
        // crate::comment::X
        /* crate::block /* nested */ crate::still_comment */
        const S: &str = "crate::string::X";
        const R: &str = r#"crate::raw"string"#;
        const C: char = '"';
        fn h<'a>(x: &'a str) -> usize { crate::inline::call(x) + leash_sandbox::thing() }
        #[cfg(test)]
        mod tests { use crate::tested::X; }
        #[cfg(test)]
        use crate::test_only::Y;
        macro_rules! m { () => { $crate::macro_own::Z } }
    "##;
    let paths: Vec<String> = source::references(text).into_iter().map(|r| r.path.join("::")).collect();
    let expected = ["crate::a::B", "crate::c", "crate::c::d", "crate::e", "super::g", "crate::inline::call"];
    assert_eq!(paths[..6], expected, "{paths:?}");
    assert_eq!(paths[6..], ["leash_sandbox::thing"], "{paths:?}");
}

/// A crate's modules (by path from its root: `["file", "validate"]`) and the edges between them, each with the
/// first line that makes it.
struct Graph {
    files: BTreeMap<Vec<String>, PathBuf>,
    edges: BTreeMap<(Vec<String>, Vec<String>), String>,
}

impl Graph {
    /// Every module file under the crate root `lib` (test-only files, `tests.rs` and `tests/`, left out) and what
    /// each names.
    fn read(root: &Path, lib: &Path) -> Graph {
        let src = lib.parent().unwrap();
        let mut files = BTreeMap::new();
        collect(src, src, &mut files);
        let mut edges = BTreeMap::new();
        for (module, file) in &files {
            let text = std::fs::read_to_string(file).unwrap();
            let shown = file.strip_prefix(root).unwrap().display().to_string();
            for r in source::references(&text) {
                let Some(target) = resolve(module, &r.path, &files) else { continue };
                if &target != module {
                    let why = format!("{shown}:{} names `{}`", r.line, r.path.join("::"));
                    edges.entry((module.clone(), target)).or_insert(why);
                }
            }
        }
        Graph { files, edges }
    }

    /// Every set of siblings that reach each other, as "`a` ↔ `b`: the lines", in module order.
    fn cycles(&self) -> Vec<String> {
        let mut by_parent: BTreeMap<Vec<String>, Vec<(&String, &String, &String)>> = BTreeMap::new();
        for ((from, to), why) in &self.edges {
            let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
            if common < from.len() && common < to.len() {
                by_parent.entry(from[..common].to_vec()).or_default().push((&from[common], &to[common], why));
            }
        }
        by_parent.iter().flat_map(|(parent, edges)| sibling_cycles(parent, edges)).collect()
    }
}

/// The strongly connected sets of siblings under `parent`, given the edges between them.
fn sibling_cycles<'a>(parent: &[String], edges: &[(&'a String, &'a String, &'a String)]) -> Vec<String> {
    let nodes: BTreeSet<&'a String> = edges.iter().flat_map(|&(a, b, _)| [a, b]).collect();
    let reach = |start: &'a String| -> BTreeSet<&'a String> {
        let mut seen = BTreeSet::from([start]);
        let mut todo = vec![start];
        while let Some(n) = todo.pop() {
            for &(a, b, _) in edges {
                if a == n && seen.insert(b) {
                    todo.push(b);
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<&String>> = nodes.iter().map(|&n| (n, reach(n))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for &n in &nodes {
        let set: BTreeSet<&String> = reached[n].iter().copied().filter(|m| reached[m].contains(n)).collect();
        if set.len() < 2 || !done.insert(set.clone()) {
            continue;
        }
        let name = |m: &String| format!("`{}`", parent.iter().chain([m]).cloned().collect::<Vec<_>>().join("/"));
        let names: Vec<String> = set.iter().map(|m| name(m)).collect();
        let lines: Vec<&str> = edges
            .iter()
            .filter(|(a, b, _)| set.contains(a) && set.contains(b))
            .map(|(_, _, why)| why.as_str())
            .collect();
        out.push(format!("{}: {}", names.join(" ↔ "), lines.join("; ")));
    }
    out
}

/// Module files under `dir`, by module path relative to `src` (`a/mod.rs` and `a.rs` are `a`, the root file is
/// `[]`); test-only files are left out.
fn collect(src: &Path, dir: &Path, out: &mut BTreeMap<Vec<String>, PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
        if stem == "tests" {
            continue;
        }
        if path.is_dir() {
            collect(src, &path, out);
            continue;
        }
        if path.extension().is_some_and(|e| e == "rs") {
            let mut module: Vec<String> = path
                .parent()
                .unwrap()
                .strip_prefix(src)
                .unwrap()
                .iter()
                .map(|s| s.to_str().unwrap().to_string())
                .collect();
            if !matches!(stem.as_str(), "mod" | "lib" | "main") || !module.is_empty() && stem != "mod" {
                module.push(stem);
            }
            out.insert(module, path);
        }
    }
}

/// The module a path written in `from` lands in: the longest prefix of it that is a module (`crate::` from the
/// root, `super::` from the parent, `self::` from `from`). `None` for paths into other crates.
fn resolve(from: &[String], path: &[String], files: &BTreeMap<Vec<String>, PathBuf>) -> Option<Vec<String>> {
    let mut base: Vec<String> = match path.first()?.as_str() {
        "crate" => Vec::new(),
        "self" | "super" => from.to_vec(),
        _ => return None,
    };
    let mut rest = path.iter().peekable();
    while let Some(seg) = rest.next_if(|s| matches!(s.as_str(), "crate" | "self" | "super")) {
        if seg == "super" {
            base.pop();
        }
    }
    let full: Vec<String> = base.into_iter().chain(rest.cloned()).collect();
    (0..=full.len()).rev().map(|n| full[..n].to_vec()).find(|m| files.contains_key(m))
}

/// The crate's `[dependencies]` on workspace crates, and the ones its code names, against `allowed`.
fn crate_dependencies(root: &Path, name: &str, lib: &str, allowed: &[&str], graph: &Graph) -> Vec<String> {
    let manifest = root.join(lib).parent().unwrap().parent().unwrap().join("Cargo.toml");
    let text = std::fs::read_to_string(manifest).unwrap();
    let mut section = "";
    let mut problems = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
        } else if section == "[dependencies]" && line.starts_with("leash-") {
            let dep = line.split(['.', ' ', '=']).next().unwrap();
            if !allowed.contains(&dep) {
                problems.push(format!("{name}: depends on {dep} (Cargo.toml), which ARCHITECTURE.md does not allow"));
            }
        }
    }
    for file in graph.files.values() {
        let text = std::fs::read_to_string(file).unwrap();
        for r in source::references(&text) {
            let dep = r.path[0].replace('_', "-");
            if dep.starts_with("leash-") && dep != name && !allowed.contains(&dep.as_str()) {
                let shown = file.strip_prefix(root).unwrap().display();
                problems.push(format!("{name}: {shown}:{} uses `{}`, from {dep}", r.line, r.path.join("::")));
            }
        }
    }
    problems
}

/// The binary's rules: a subcommand (`cmd/x`) names no other subcommand; only `main.rs` names a subcommand, and no
/// module names anything of `main.rs` itself (it wires, it is not a library).
fn subcommand_rules(graph: &Graph) -> Vec<String> {
    let in_cmd = |m: &[String]| m.first().is_some_and(|s| s == "cmd") && m.len() > 1;
    let mut problems = Vec::new();
    for ((from, to), why) in &graph.edges {
        let own = |m: &[String]| in_cmd(m) && m[..2] == from[..2.min(from.len())];
        let broken = if !from.is_empty() && to.is_empty() {
            Some("main.rs")
        } else if in_cmd(from) && in_cmd(to) && !own(to) {
            Some("another subcommand")
        } else {
            (!in_cmd(from) && !from.is_empty() && in_cmd(to)).then_some("a subcommand")
        };
        if let Some(what) = broken {
            problems.push(format!("leash: `{}` imports {what}: {why}", from.join("/")));
        }
    }
    problems
}
