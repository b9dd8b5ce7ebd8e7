//! The architecture document and the front door keep up with the code.
//!
//! `ARCHITECTURE.md` cites the code by name, in backticks, under one convention (stated in the
//! document itself, "How names are cited"):
//! - a Rust path with `::`: either `crate_name::module::...::Item` (the crate as Rust spells it,
//!   `teamster_core`, `teamster_dp`, ...), whose modules must be files (`x.rs` or `x/mod.rs`)
//!   and whose items must be defined in that module's files, or `Type::member`, a member (a
//!   method, an associated item, a variant, a field) defined in a file that defines or
//!   implements `Type`;
//! - a lone `UpperCamelCase` name: a type, trait, enum variant or alias defined somewhere;
//! - a `name()`: a function defined somewhere;
//! - a file path from the repository's root (`crates/.../x.rs`, `docs/x.md`), or any name ending
//!   in `.rs`: the file must exist.
//!
//! Anything else in backticks (commands, keys, metric names) is prose and not checked. A name
//! is defined where a `.rs` file under `crates/` declares it: `fn`, `struct`, `enum`, `trait`,
//! `type`, `union`, `const`, `static`, `mod`, `macro_rules!`, an enum variant or a field.
//!
//! Also: `README.md` stays a front door (at most [`README_MAX_LINES`] lines), and every relative
//! link in `README.md`, `ARCHITECTURE.md` and `docs/*.md` (and in `SECURITY.md` and
//! `scenarios/README.md`) points to a file that exists, and to a heading there if it names one.
//!
//! Only std: this test reads files.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The README's length at most (the issue asks for "at most about 250").
const README_MAX_LINES: usize = 260;

/// The fewest names `ARCHITECTURE.md` must cite under the convention: an empty map is no map.
const CITED_AT_LEAST: usize = 30;

/// The workspace's crates, as Rust spells them, and their directories.
const CRATES: &[(&str, &str)] = &[
    ("teamster_core", "crates/teamster-core"),
    ("teamster_dp", "crates/teamster-dp"),
    ("teamster_kernel", "crates/teamster-kernel"),
    ("teamster_sim", "crates/teamster-sim"),
    ("teamster_web", "crates/teamster-web"),
    ("teamster", "crates/teamster"),
];

/// Paths of these crates are prose, not citations of this repository's code.
const FOREIGN: &[&str] = &["std", "core", "alloc"];

/// The repository's top-level directories a cited file path may start with.
const TOP: &[&str] = &[
    "crates",
    "docs",
    "scenarios",
    "packaging",
    "bench",
    "fuzz",
    "tests",
    ".ci",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Every `.rs` file under `dir`, recursively, skipping build output.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if p.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&p, out);
            }
        } else if name.ends_with(".rs") {
            out.push(p);
        }
    }
}

/// A source file, with the names it declares and the types it defines or implements.
struct Source {
    path: PathBuf,
    /// Items (`fn`, `struct`, `mod`, ...) and enum variants.
    declared: HashSet<String>,
    /// Fields (`name: Type` at the start of a line).
    fields: HashSet<String>,
    /// Functions alone.
    functions: HashSet<String>,
    about: HashSet<String>,
}

/// The source files, read and indexed once.
struct Sources {
    files: Vec<Source>,
}

impl Sources {
    fn load() -> Sources {
        let mut paths = Vec::new();
        rust_files(&root().join("crates"), &mut paths);
        let files = paths
            .into_iter()
            .map(|path| {
                let text = read(&path);
                let mut f = Source {
                    path,
                    declared: HashSet::new(),
                    fields: HashSet::new(),
                    functions: HashSet::new(),
                    about: HashSet::new(),
                };
                for line in text.lines() {
                    index_line(line, &mut f);
                }
                f
            })
            .collect();
        Sources { files }
    }

    fn under<'a>(&'a self, scope: &'a [PathBuf]) -> impl Iterator<Item = &'a Source> + 'a {
        self.files
            .iter()
            .filter(move |f| scope.is_empty() || scope.iter().any(|s| f.path == *s || f.path.starts_with(s)))
    }
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn is_ident(s: &str) -> bool {
    !s.is_empty() && !s.starts_with(|c: char| c.is_ascii_digit()) && s.chars().all(is_ident_char)
}

fn is_upper_camel(s: &str) -> bool {
    is_ident(s)
        && s.starts_with(|c: char| c.is_ascii_uppercase())
        && s.chars().any(|c| c.is_ascii_lowercase())
        && !s.contains('_')
}

/// The identifier `s` starts with, if any.
fn leading_ident(s: &str) -> Option<&str> {
    let end = s.find(|c: char| !is_ident_char(c)).unwrap_or(s.len());
    let id = &s[..end];
    is_ident(id).then_some(id)
}

/// Adds what `line` declares (an item, a module, a macro, an enum variant or a field), and the
/// type it defines or implements, to `f`.
fn index_line(line: &str, f: &mut Source) {
    let t = line.trim_start();
    if t.starts_with("//") || t.starts_with('#') {
        return;
    }
    const KINDS: &[&str] = &[
        "fn ",
        "struct ",
        "enum ",
        "trait ",
        "type ",
        "union ",
        "const ",
        "static ",
        "mod ",
        "macro_rules! ",
    ];
    for kind in KINDS {
        let mut from = 0;
        while let Some(i) = t[from..].find(kind) {
            let at = from + i;
            if at == 0 || !t[..at].ends_with(is_ident_char) {
                let rest = &t[at + kind.len()..];
                let rest = rest.strip_prefix("mut ").unwrap_or(rest);
                if let Some(name) = leading_ident(rest) {
                    f.declared.insert(name.to_string());
                    if *kind == "fn " {
                        f.functions.insert(name.to_string());
                    }
                    if ["struct ", "enum ", "trait ", "union ", "type "].contains(kind) {
                        f.about.insert(name.to_string());
                    }
                }
            }
            from = at + kind.len();
        }
    }
    let bare = ["pub(crate) ", "pub(super) ", "pub "]
        .iter()
        .find_map(|p| t.strip_prefix(p))
        .unwrap_or(t);
    if bare.starts_with("impl") && !bare[4..].starts_with(is_ident_char) {
        // Every name in an impl's head: `impl<T> IngressQueue<T>`, `impl Backend for Link`.
        let head = bare.split('{').next().unwrap_or(bare);
        for word in head.split(|c: char| !is_ident_char(c)).filter(|w| is_ident(w)) {
            f.about.insert(word.to_string());
        }
    }
    // A variant (`Name,`, `Name(..)`, `Name { .. }`, `Name = 3`) or a field (`pub name: T`).
    if let Some(name) = leading_ident(bare) {
        let rest = bare[name.len()..].trim_start();
        let upper = name.starts_with(|c: char| c.is_ascii_uppercase());
        let field = rest.starts_with(':') && !rest.starts_with("::");
        let variant = rest.is_empty() || [",", "(", "{", "= "].iter().any(|p| rest.starts_with(p));
        if field {
            f.fields.insert(name.to_string());
        } else if upper && variant {
            f.declared.insert(name.to_string());
        }
    }
}

/// Whether a file in `scope` (all of `crates/` if empty) declares `name`.
fn defined(src: &Sources, scope: &[PathBuf], name: &str) -> bool {
    src.under(scope).any(|f| f.declared.contains(name))
}

/// Whether a file in `scope` that defines or implements `ty` declares `member` (an item, a
/// variant or a field).
fn member_defined(src: &Sources, scope: &[PathBuf], ty: &str, member: &str) -> bool {
    src.under(scope)
        .any(|f| f.about.contains(ty) && (f.declared.contains(member) || f.fields.contains(member)))
}

/// Whether a file under `crates/` declares the function `name`.
fn function_defined(src: &Sources, name: &str) -> bool {
    src.files.iter().any(|f| f.functions.contains(name))
}

/// The module file (or directory) `name` in `dir`, if there is one.
fn module_in(dir: &Path, name: &str) -> Option<(PathBuf, PathBuf)> {
    let file = dir.join(format!("{name}.rs"));
    let sub = dir.join(name);
    if file.is_file() {
        Some((file, sub))
    } else if sub.join("mod.rs").is_file() {
        Some((sub.join("mod.rs"), sub))
    } else {
        None
    }
}

/// Checks one backticked token; `Some(why)` if it cites something that does not exist.
/// `None` also for prose (not a citation); `cited` counts the citations.
fn check_token(src: &Sources, token: &str, cited: &mut usize) -> Option<String> {
    let root = root();
    let token = token.trim();
    if token.is_empty() || token.contains(char::is_whitespace) {
        return None;
    }
    // A file path from the repository's root.
    let first = token.split('/').next().unwrap_or("");
    if token.ends_with(".rs") || (token.contains('/') && TOP.contains(&first)) {
        *cited += 1;
        let path = token.trim_end_matches('/');
        // A glob names the files of a directory: that directory must exist.
        let path = match path.find('*') {
            Some(i) => &path[..path[..i].rfind('/').unwrap_or(0)],
            None => path,
        };
        return (!root.join(path).exists()).then(|| format!("`{token}`: no such file or directory"));
    }
    let name = token.strip_suffix("()").unwrap_or(token);
    let function = name.len() < token.len();
    if name.contains("::") {
        let segs: Vec<&str> = name.split("::").collect();
        if !segs.iter().all(|s| is_ident(s)) {
            return None;
        }
        if FOREIGN.contains(&segs[0]) {
            return None;
        }
        *cited += 1;
        if let Some((_, dir)) = CRATES.iter().find(|(c, _)| *c == segs[0]) {
            return check_crate_path(src, token, &root.join(dir).join("src"), &segs[1..]);
        }
        return match segs[..] {
            [ty, member] if is_upper_camel(ty) => check_member(src, token, &[], ty, member),
            _ => Some(format!(
                "`{token}`: a path must start with a crate (teamster_core::..., teamster::...) or be Type::member"
            )),
        };
    }
    if function && is_ident(name) {
        *cited += 1;
        return (!function_defined(src, name)).then(|| format!("`{token}`: no `fn {name}` under crates/"));
    }
    if is_upper_camel(name) {
        *cited += 1;
        return (!defined(src, &[], name)).then(|| format!("`{token}`: `{name}` is not defined under crates/"));
    }
    None
}

/// Checks `segs`, a path inside the crate whose sources are `src_dir`: its modules as files,
/// then its items, defined in the last module's files (a member in its type's files).
fn check_crate_path(src: &Sources, token: &str, src_dir: &Path, segs: &[&str]) -> Option<String> {
    let mut dir = src_dir.to_path_buf();
    let mut scope = vec![dir.join("lib.rs")];
    let mut rest = segs;
    while let Some((file, sub)) = rest.first().and_then(|seg| module_in(&dir, seg)) {
        scope = vec![file, sub.clone()];
        dir = sub;
        rest = &rest[1..];
    }
    if !scope[0].is_file() {
        return Some(format!("`{token}`: no crate root {}", scope[0].display()));
    }
    if dir == src_dir {
        // Items re-exported at the crate root may live anywhere in the crate.
        scope = vec![src_dir.to_path_buf()];
    }
    let shown = scope[0].strip_prefix(root()).unwrap_or(&scope[0]).display().to_string();
    match rest {
        [] => None,
        [item] => (!defined(src, &scope, item)).then(|| format!("`{token}`: `{item}` is not defined in {shown}")),
        [first, ..] if !defined(src, &scope, first) => Some(format!("`{token}`: `{first}` is not defined in {shown}")),
        [.., ty, member] => check_member(src, token, &[src_dir.to_path_buf()], ty, member),
    }
}

/// Checks `ty::member`: `ty` is defined, and `member` in a file that defines or implements it.
fn check_member(src: &Sources, token: &str, scope: &[PathBuf], ty: &str, member: &str) -> Option<String> {
    if !defined(src, scope, ty) {
        Some(format!("`{token}`: `{ty}` is not defined under crates/"))
    } else if !member_defined(src, scope, ty, member) {
        Some(format!(
            "`{token}`: no `{member}` where `{ty}` is defined or implemented"
        ))
    } else {
        None
    }
}

/// The text outside fenced code blocks, fences replaced by blank lines (so line counts hold).
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// Inline code spans (single backticks; a span may wrap lines).
fn code_spans(text: &str) -> Vec<String> {
    let mut spans = Vec::new();
    let mut parts = text.split('`');
    parts.next();
    while let Some(inside) = parts.next() {
        spans.push(inside.replace('\n', " "));
        if parts.next().is_none() {
            break;
        }
    }
    spans
}

#[test]
fn every_name_the_architecture_cites_exists() {
    let src = Sources::load();
    let text = read(&root().join("ARCHITECTURE.md"));
    let mut cited = 0;
    let mut missing = BTreeSet::new();
    for token in code_spans(&prose(&text)) {
        if let Some(why) = check_token(&src, &token, &mut cited) {
            missing.insert(why);
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md cites names that no longer exist (rename them there, or cite what replaced them):\n  {}",
        missing.into_iter().collect::<Vec<_>>().join("\n  ")
    );
    assert!(
        cited >= CITED_AT_LEAST,
        "ARCHITECTURE.md cites {cited} names under its convention, expected at least {CITED_AT_LEAST}"
    );
}

#[test]
fn the_readme_is_a_front_door() {
    let lines = read(&root().join("README.md")).lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, at most {README_MAX_LINES}: move the detail into docs/ and link to it"
    );
}

/// GitHub's anchor for a heading: lower case, spaces to hyphens, punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings (a repeated heading gets `-1`, `-2`, ...).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for line in prose(text).lines() {
        let Some(h) = line.strip_prefix('#') else { continue };
        let h = h.trim_start_matches('#');
        if !h.starts_with(' ') {
            continue;
        }
        let s = slug(h);
        let n = seen.entry(s.clone()).or_insert(0);
        out.insert(if *n == 0 { s.clone() } else { format!("{s}-{n}") });
        *n += 1;
    }
    out
}

/// The link targets of a Markdown file: inline `[text](target)` and reference definitions
/// `[label]: target`, outside code.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let prose = prose(text);
    // Drop inline code, whose brackets are not links.
    let plain: String = prose.split('`').step_by(2).collect::<Vec<_>>().join(" ");
    let mut rest = plain.as_str();
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split_whitespace().next().unwrap_or("");
        out.push(target.trim_matches(|c| c == '<' || c == '>').to_string());
        rest = &after[end..];
    }
    for line in plain.lines() {
        let t = line.trim_start();
        if let (true, Some(i)) = (t.starts_with('['), t.find("]: ")) {
            out.push(t[i + 3..].split_whitespace().next().unwrap_or("").to_string());
        }
    }
    out
}

#[test]
fn every_relative_link_in_the_documents_leads_somewhere() {
    let root = root();
    let mut docs = vec![
        root.join("README.md"),
        root.join("ARCHITECTURE.md"),
        root.join("SECURITY.md"),
        root.join("scenarios/README.md"),
    ];
    let mut in_docs: Vec<PathBuf> = fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    in_docs.sort();
    assert!(!in_docs.is_empty(), "docs/ holds no Markdown file");
    docs.extend(in_docs);
    let mut broken = Vec::new();
    for doc in &docs {
        let text = read(doc);
        let shown = doc.strip_prefix(&root).unwrap_or(doc).display().to_string();
        for target in links(&text) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let path = if file.is_empty() {
                doc.clone()
            } else {
                doc.parent().unwrap().join(file)
            };
            if !path.exists() {
                broken.push(format!("{shown}: `{target}`: no such file"));
                continue;
            }
            if let Some(anchor) = anchor {
                let is_md = path.extension().is_some_and(|e| e == "md");
                if is_md && !anchors(&read(&path)).contains(anchor) {
                    broken.push(format!("{shown}: `{target}`: no heading with that anchor"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n  {}", broken.join("\n  "));
}

#[test]
fn the_convention_tells_names_from_prose() {
    // The checker itself: these hold for as long as the names it looks for exist.
    let src = Sources::load();
    let mut n = 0;
    for ok in [
        "teamster_core::switch::Switch::forward",
        "Switch::forward",
        "teamster_dp::datapath::ingress",
        "teamster_core::ioc::Ioc",
        "Datapath",
        "recv_batch()",
        "crates/teamster-dp/src/datapath.rs",
        "Ingress::Port",
    ] {
        assert_eq!(check_token(&src, ok, &mut n), None, "{ok}");
    }
    for missing in [
        "teamster_core::switch::Switch::no_such_method",
        "Switch::no_such_method",
        "teamster_dp::datapath::no_such_module::Thing",
        "NoSuchType",
        "no_such_function()",
        "crates/teamster-dp/src/no_such_file.rs",
        "api::routes::change",
    ] {
        let why = check_token(&src, missing, &mut n).unwrap_or_else(|| panic!("{missing} passed"));
        assert!(why.contains(missing), "{why}");
    }
    for prose in [
        "teamster ctl ports",
        "switch.toml",
        "workers",
        "/run/teamster/teamster.sock",
        "SIGHUP",
    ] {
        let before = n;
        assert_eq!(check_token(&src, prose, &mut n), None, "{prose}");
        assert_eq!(n, before, "{prose} taken for a citation");
    }
}
