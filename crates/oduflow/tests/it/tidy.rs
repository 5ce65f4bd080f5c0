//! Tidy: ARCHITECTURE.md's structural rules, checked mechanically over the
//! repository's files.
//! - Only `oduflow-store` knows SQL: `sqlx` appears in no other crate's
//!   sources or manifest (tests reach the database through the store's test
//!   kit, `oduflow_store::testing`).
//! - Only `oduflow-vultr` and its twin, the simulator, know Vultr's JSON.
//! - Nothing refers to files outside the repository.
//! - No function grows past its limit (70 lines in the engine and the
//!   store, 100 elsewhere), no engine file past 400 lines; the longer ones
//!   that exist are listed with an allowance that may only shrink.
//! - The binary prints to standard output only through `outln!`.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// Every file of the repository we wrote: not build output, not git's.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            if !matches!(name.as_str(), "target" | ".git" | "node_modules") {
                files(&p, out);
            }
        } else {
            out.push(p);
        }
    }
}

fn rust_sources() -> Vec<(String, String)> {
    let root = root();
    let mut all = Vec::new();
    files(&root.join("crates"), &mut all);
    all.into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| (p.strip_prefix(&root).unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap()))
        .collect()
}

#[test]
fn only_the_store_knows_sql() {
    let mut found = Vec::new();
    for (path, text) in rust_sources() {
        if path.starts_with("crates/oduflow-store/") || path.ends_with("tests/it/tidy.rs") {
            continue;
        }
        let n = text.lines().filter(|l| l.contains("sqlx")).count();
        if n > 0 {
            found.push((path, n));
        }
    }
    assert!(
        found.is_empty(),
        "SQL outside oduflow-store (it belongs in the store, or in its test kit, oduflow_store::testing): {found:?}"
    );
    let mut toml = Vec::new();
    files(&root().join("crates"), &mut toml);
    for p in toml.iter().filter(|p| p.file_name().is_some_and(|n| n == "Cargo.toml")) {
        let text = std::fs::read_to_string(p).unwrap();
        let crate_dir = p.parent().unwrap().file_name().unwrap().to_string_lossy().into_owned();
        if crate_dir != "oduflow-store" {
            assert!(!text.contains("sqlx"), "{}: sqlx is a dependency outside oduflow-store", p.display());
        }
    }
}

/// Field names only Vultr's JSON has.
const VULTR_FIELDS: &[&str] = &[
    "main_ip",
    "server_status",
    "power_status",
    "attached_to_instance",
    "default_password",
    "date_created",
    "mount_id",
];

#[test]
fn only_the_adapter_and_the_simulator_know_vultrs_json() {
    let mut bad = Vec::new();
    for (path, text) in rust_sources() {
        if path.starts_with("crates/oduflow-vultr/")
            || path.starts_with("crates/oduflow-sim/")
            || path.ends_with("tidy.rs")
        {
            continue;
        }
        for f in VULTR_FIELDS {
            if text.contains(&format!("\"{f}\"")) {
                bad.push(format!("{path}: \"{f}\""));
            }
        }
    }
    assert!(bad.is_empty(), "Vultr JSON outside oduflow-vultr and oduflow-sim:\n  {}", bad.join("\n  "));
}

#[test]
fn nothing_refers_outside_the_repository() {
    let root = root();
    let mut all = Vec::new();
    files(&root, &mut all);
    let needles =
        [concat!("..", "/shared"), concat!("/work", "/shared"), concat!("DESIGN", ".md"), concat!("vultr-api", ".md")];
    let mut bad = Vec::new();
    for p in all {
        let Ok(text) = std::fs::read_to_string(&p) else { continue };
        for n in needles {
            if text.contains(n) {
                bad.push(format!("{}: {n}", p.strip_prefix(&root).unwrap().display()));
            }
        }
    }
    assert!(bad.is_empty(), "references to files outside the repository:\n  {}", bad.join("\n  "));
}

/// The binary writes standard output only through `output::outln!`, which
/// ends a command quietly when the reader has gone (`| head -1`);
/// `println!` and `print!` panic there.
#[test]
fn the_binary_prints_only_through_outln() {
    let mut bad = Vec::new();
    for (path, text) in rust_sources().into_iter().filter(|(p, _)| p.starts_with("crates/oduflow/src/")) {
        for (i, l) in text.lines().enumerate() {
            let code = l.split("//").next().unwrap_or("");
            let printing = code.match_indices("print").any(|(at, _)| {
                let before = code[..at].chars().next_back();
                let after = &code[at + "print".len()..];
                before != Some('e') && (after.starts_with("!(") || after.starts_with("ln!("))
            });
            if printing {
                bad.push(format!("{path}:{}: {}", i + 1, l.trim()));
            }
        }
    }
    assert!(bad.is_empty(), "print!/println! in the binary (use output::outln!):\n  {}", bad.join("\n  "));
}

/// The longest a function may be, signature to closing brace: in the
/// engine and the store, where the protocol lives, 70 lines; anywhere else
/// (the laboratory and the tests included), 100.
fn fn_lines_max(path: &str) -> usize {
    if path.starts_with("crates/oduflow-engine/src/") || path.starts_with("crates/oduflow-store/src/") {
        70
    } else {
        100
    }
}

/// The longest an engine source file may be.
const ENGINE_FILE_LINES_MAX: usize = 400;

/// The ratchet: an allowance that lets a known function or file exceed its
/// limit stays within this share above its real length, so shrinking one
/// means lowering its allowance (or deleting it), and it can never grow
/// back into the room left.
const ALLOWANCE_SLACK_PERCENT: usize = 10;

/// Functions longer than their limit, with the most lines each may have.
/// They may only shrink.
const LONG_FUNCTIONS: &[(&str, &str, usize)] = &[];

/// Engine files longer than [`ENGINE_FILE_LINES_MAX`], with the most lines
/// each may have. They may only shrink.
const LONG_ENGINE_FILES: &[(&str, usize)] = &[];

/// (name, lines) of every `fn` with a body: from its signature to the
/// closing brace at the signature's indentation.
fn functions(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let indent = l.len() - t.len();
        let t = t.strip_prefix("pub(crate) ").or_else(|| t.strip_prefix("pub ")).unwrap_or(t);
        let t = t.strip_prefix("const ").unwrap_or(t);
        let t = t.strip_prefix("async ").unwrap_or(t);
        let Some(rest) = t.strip_prefix("fn ") else { continue };
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        // A declaration without a body (a trait's) ends with `;` before `{`.
        let Some(open) = (i..lines.len()).find(|&j| lines[j].contains('{') || lines[j].trim_end().ends_with(';'))
        else {
            continue;
        };
        if !lines[open].contains('{') {
            continue;
        }
        if lines[open].trim_end().ends_with('}') && open == i {
            out.push((name, 1));
            continue;
        }
        let close = (open + 1..lines.len()).find(|&k| {
            let c = lines[k];
            c.len() > indent && c[..indent].trim().is_empty() && c[indent..].starts_with('}')
        });
        if let Some(k) = close {
            out.push((name, k - i + 1));
        }
    }
    out
}

/// Checks measured lengths against their limit and their allowances:
/// what is over its limit needs an allowance, no more than it allows; an
/// allowance more than the slack above the real length, or for something
/// no longer over its limit, must be lowered or removed. The problems, and
/// the allowance list as it should read.
fn ratchet(measured: &[(String, usize, usize)], allowed: &[(String, usize)]) -> (Vec<String>, Vec<String>) {
    let mut bad = Vec::new();
    let mut list = Vec::new();
    for (what, n, limit) in measured.iter().filter(|(_, n, limit)| n > limit) {
        list.push(format!("{what}: {n}"));
        match allowed.iter().find(|(a, _)| a == what) {
            None => bad.push(format!("{what}: {n} lines, over the {limit}-line limit")),
            Some((_, max)) if n > max => bad.push(format!("{what}: {n} lines, allowed {max}: it may only shrink")),
            Some((_, max)) if *max > n + n * ALLOWANCE_SLACK_PERCENT / 100 => bad.push(format!(
                "{what}: {n} lines, allowed {max}: lower the allowance to {n} (it may not sit more than \
                 {ALLOWANCE_SLACK_PERCENT}% above the real length)"
            )),
            Some(_) => {}
        }
    }
    for (what, _) in allowed {
        if !measured.iter().any(|(m, n, limit)| m == what && n > limit) {
            bad.push(format!("{what}: allowed, but no longer over its limit (or gone): remove the allowance"));
        }
    }
    (bad, list)
}

#[test]
fn no_function_grows_past_the_limit() {
    let mut measured = Vec::new();
    for (path, text) in rust_sources() {
        for (name, n) in functions(&text) {
            measured.push((format!("{path} {name}"), n, fn_lines_max(&path)));
        }
    }
    let allowed: Vec<(String, usize)> = LONG_FUNCTIONS.iter().map(|(p, f, n)| (format!("{p} {f}"), *n)).collect();
    let (bad, list) = ratchet(&measured, &allowed);
    eprintln!("tidy: {} function(s) over their limit (each needs an allowance)", list.len());
    assert!(bad.is_empty(), "functions:\n  {}\n(over their limit now:\n  {})", bad.join("\n  "), list.join("\n  "));
}

#[test]
fn no_engine_file_grows_past_the_limit() {
    let measured: Vec<(String, usize, usize)> = rust_sources()
        .into_iter()
        .filter(|(p, _)| p.starts_with("crates/oduflow-engine/src/"))
        .map(|(p, t)| (p, t.lines().count(), ENGINE_FILE_LINES_MAX))
        .collect();
    let allowed: Vec<(String, usize)> = LONG_ENGINE_FILES.iter().map(|(p, n)| ((*p).to_owned(), *n)).collect();
    let (bad, list) = ratchet(&measured, &allowed);
    assert!(bad.is_empty(), "engine files:\n  {}\n(over the limit now:\n  {})", bad.join("\n  "), list.join("\n  "));
}

/// The ratchet fails on each way an allowance can be wrong.
#[test]
fn the_ratchet_only_tightens() {
    let m = |w: &str, n: usize| (w.to_owned(), n, 70);
    let a = |w: &str, n: usize| (w.to_owned(), n);
    assert!(ratchet(&[m("f", 80)], &[a("f", 80)]).0.is_empty());
    assert!(ratchet(&[m("f", 80)], &[a("f", 88)]).0.is_empty(), "within the slack");
    assert_eq!(ratchet(&[m("f", 80)], &[]).0.len(), 1, "over the limit without an allowance");
    assert_eq!(ratchet(&[m("f", 81)], &[a("f", 80)]).0.len(), 1, "grown past its allowance");
    assert_eq!(ratchet(&[m("f", 80)], &[a("f", 89)]).0.len(), 1, "an allowance with room to grow back into");
    assert_eq!(ratchet(&[m("f", 60)], &[a("f", 80)]).0.len(), 1, "an allowance no longer needed");
    assert_eq!(ratchet(&[], &[a("f", 80)]).0.len(), 1, "an allowance for a function that is gone");
}

#[test]
fn the_function_scanner_measures() {
    let text = "fn a() {\n    1\n}\n\npub async fn b(\n    x: u8,\n) -> u8 {\n    if x > 0 {\n        x\n    } else {\n        0\n    }\n}\ntrait T {\n    fn c(&self);\n}\n";
    assert_eq!(functions(text), vec![("a".to_owned(), 3), ("b".to_owned(), 9)]);
}

/// The release binary is built without debug info and stripped (with line
/// tables and symbols it weighs over 100 MB; BENCHMARKS.md, "The release
/// binary").
#[test]
fn the_release_profile_leaves_debug_info_out() {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let profile = manifest.split("[profile.release]").nth(1).expect("a [profile.release] in the workspace manifest");
    let profile = profile.split("\n[").next().unwrap();
    let keys: Vec<&str> = profile.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    assert!(keys.contains(&"debug = false"), "[profile.release] must say debug = false: {keys:?}");
    assert!(keys.contains(&"strip = true"), "[profile.release] must say strip = true: {keys:?}");
}

/// The product build (`--no-default-features`) carries neither the
/// laboratory nor the store's test kit: the binary's manifest takes
/// oduflow-lab only through the `lab` feature and the kit only for its own
/// tests, and its sources name the laboratory only under that feature.
#[test]
fn the_product_build_leaves_the_laboratory_out() {
    let manifest = std::fs::read_to_string(root().join("crates/oduflow/Cargo.toml")).unwrap();
    let (normal, dev) = manifest.split_once("[dev-dependencies]").expect("dev-dependencies");
    assert!(normal.contains("lab = [\"dep:oduflow-lab\"]"), "the lab feature must be what brings oduflow-lab in");
    assert!(normal.contains("oduflow-lab = { workspace = true, optional = true }"), "oduflow-lab must be optional");
    assert!(!normal.contains("testing"), "the product's dependencies must not enable the test kit");
    assert!(dev.contains("features = [\"testing\"]"), "the binary's tests use the kit");
    let mut bad = vec![];
    for (path, text) in rust_sources().into_iter().filter(|(p, _)| p.starts_with("crates/oduflow/src/")) {
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if l.contains("oduflow_store::testing") {
                bad.push(format!("{path}:{}: the test kit in the product", i + 1));
            }
            // The attribute on the line before, or on the one-line-bodied
            // function it sits in.
            let gated = lines[i.saturating_sub(2)..i].iter().any(|p| p.contains("#[cfg(feature = \"lab\")]"));
            if l.contains("oduflow_lab::") && !gated && !l.trim_start().starts_with("//") {
                bad.push(format!("{path}:{}: the laboratory outside #[cfg(feature = \"lab\")]", i + 1));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The prose we wrote and keep: Rust sources, Markdown and TOML under
/// `crates/`, `docs/`, `bench/`, `deploy/` and `.config/`, every script in
/// `scripts/`, and the top-level documents and manifest. Paths are relative
/// to the repository's root.
fn prose_files() -> Vec<(String, String)> {
    let root = root();
    let mut all = Vec::new();
    for dir in ["crates", "docs", "bench", "deploy", ".config"] {
        files(&root.join(dir), &mut all);
    }
    // Not the migrations' SQL: sqlx records each migration's checksum in
    // every database it ran on, so a changed comment there would refuse to
    // start against every deployed database.
    all.retain(|p| p.extension().is_some_and(|e| ["rs", "md", "toml", "sh"].contains(&e.to_str().unwrap_or(""))));
    files(&root.join("scripts"), &mut all);
    all.extend(["README.md", "ARCHITECTURE.md", "BENCHMARKS.md", "Cargo.toml"].map(|f| root.join(f)));
    all.into_iter()
        .filter_map(|p| {
            let text = std::fs::read_to_string(&p).ok()?;
            Some((p.strip_prefix(&root).unwrap().to_string_lossy().into_owned(), text))
        })
        .collect()
}

/// Where a line points at a tracker entry rather than saying what it means:
/// the word "issue" (or "issues", any case), then an optional space and an
/// optional `#`, then a digit; or a `#` right after the start of the line, a
/// space, `(`, `[` or `,`, followed by digits that end the word (so a CSS
/// colour such as `color:#222` and Rust's `#[...]` are not tags).
fn tracker_references(line: &str) -> Vec<String> {
    let lower = line.to_ascii_lowercase();
    let mut found = Vec::new();
    for (at, word) in lower.match_indices("issue") {
        let rest = &lower[at + word.len()..];
        let rest = rest.strip_prefix('s').unwrap_or(rest);
        let rest = rest.strip_prefix(' ').unwrap_or(rest);
        let rest = rest.strip_prefix('#').unwrap_or(rest);
        if rest.starts_with(|c: char| c.is_ascii_digit()) {
            let end = lower.len() - rest.len() + rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            found.push(line[at..end].to_owned());
        }
    }
    for (at, _) in line.match_indices('#') {
        let before = line[..at].chars().next_back();
        if !matches!(before, None | Some(' ' | '\t' | '(' | '[' | ',')) {
            continue;
        }
        let rest = &line[at + 1..];
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let ends_word = !rest[digits..].starts_with(|c: char| c.is_alphanumeric() || c == '_');
        if digits > 0 && ends_word {
            found.push(line[at..at + 1 + digits].to_owned());
        }
    }
    found
}

/// A comment or a document says what a thing is and why, in its own words:
/// "the tidy limit", not a tracker's number, which means nothing to a reader
/// without the tracker and goes stale when the work is done.
#[test]
fn no_prose_cites_a_tracker_number() {
    let mut bad = Vec::new();
    for (path, text) in prose_files() {
        for (i, l) in text.lines().enumerate() {
            for r in tracker_references(l) {
                bad.push(format!("{path}:{}: {r}", i + 1));
            }
        }
    }
    assert!(bad.is_empty(), "tracker references (say what they stand for instead):\n  {}", bad.join("\n  "));
}

#[test]
fn the_reference_scanner_finds() {
    let word = "Issue";
    for hit in
        [format!("see {word} 14."), format!("({word}#29)"), format!("{word}s 3 and 4"), format!("fixed {}29", '#')]
    {
        assert_eq!(tracker_references(&hit).len(), 1, "{hit}");
    }
    for miss in ["color:#222;", "#[cfg(test)]", "an issue, 3 times", "r#\"x\"#", "## 3. Heading", "#abc"] {
        assert!(tracker_references(miss).is_empty(), "{miss}");
    }
}

/// ARCHITECTURE.md is a map: what each part owns, the invariants and the
/// seams, each a line or two, with the details in docs/protocol.md and
/// docs/vultr.md and the figures in BENCHMARKS.md. A map that keeps
/// growing has become a log.
const ARCHITECTURE_WORDS_MAX: usize = 1500;

#[test]
fn the_architecture_stays_a_map() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let words = text.split_whitespace().count();
    assert!(
        words <= ARCHITECTURE_WORDS_MAX,
        "ARCHITECTURE.md has {words} words, over {ARCHITECTURE_WORDS_MAX}: move details to docs/protocol.md or \
         docs/vultr.md and figures to BENCHMARKS.md"
    );
}
