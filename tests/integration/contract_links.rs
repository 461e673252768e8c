//! Citations of the repository's own documents cannot rot, and nothing points outside the
//! repository (issue 17).
//!
//! Code comments cite the random-stream contract as `docs/contract.md §5.7` (a list such as
//! `§1, §11` may follow one name) or link a heading, `docs/contract.md#5-conversions`.
//! This test reads every source and documentation file of the checkout and fails when a
//! citation of a document in `docs/` names a section number or a heading anchor (as GitHub
//! makes anchors from headings) that the document does not have, including a document's
//! links to its own headings (`](#anchor)`). It also fails on any mention of the design
//! note or notes folder that once lived beside the checkout: a fresh clone has nothing
//! beside it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Folders never scanned: build output, git's own, downloaded wheels and venvs.
const SKIP_DIRS: [&str; 5] = ["target", ".git", "gpu-bundle", ".whl", "node_modules"];
/// Extensions of the files scanned (plus the extensionless `.ci/run`).
const EXTENSIONS: [&str; 11] = [
    "rs", "md", "toml", "cu", "cuh", "cpp", "h", "sh", "py", "txt", "yml",
];

/// What a document offers to citations: numbered sections and heading anchors.
#[derive(Default)]
struct Targets {
    sections: BTreeSet<String>,
    anchors: BTreeSet<String>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file to scan under `dir`, relative paths sorted.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            let hidden = name.starts_with('.') && name != ".ci";
            if !hidden && !SKIP_DIRS.contains(&name.as_str()) && !name.starts_with(".venv") {
                files(&path, out);
            }
        } else {
            let ext = path.extension().map(|e| e.to_string_lossy().into_owned());
            let ci_script = path.ends_with(".ci/run");
            if ci_script || ext.is_some_and(|e| EXTENSIONS.contains(&e.as_str())) {
                out.push(path);
            }
        }
    }
}

/// GitHub's anchor for a heading: lower case, spaces to hyphens, punctuation other than
/// `-` and `_` dropped.
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

/// The headings of a Markdown document (outside code fences).
fn targets(text: &str) -> Targets {
    let mut targets = Targets::default();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        if fenced {
            continue;
        }
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        targets.anchors.insert(slug(heading));
        let number: String = heading
            .trim()
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let number = number.trim_end_matches('.');
        if number.starts_with(|c: char| c.is_ascii_digit()) {
            targets.sections.insert(number.to_string());
        }
    }
    targets
}

/// Skips what may sit between a document's name and its section numbers: spaces, a
/// closing backtick, and across a line break a comment leader (`//!`, `///`, `//`, `#`).
fn skip_filler(mut rest: &str) -> &str {
    loop {
        let trimmed = rest.trim_start_matches([' ', '\t', '`', '*']);
        let Some(next_line) = trimmed.strip_prefix('\n') else {
            return trimmed;
        };
        let next_line = next_line.trim_start_matches([' ', '\t']);
        rest = ["//!", "///", "//", "#"]
            .iter()
            .find_map(|leader| next_line.strip_prefix(leader))
            .unwrap_or(next_line);
    }
}

/// The section numbers cited right after a document's name: `§5`, `§5.7, §11`,
/// `§1 and §3`.
fn cited_sections(after_name: &str) -> Vec<String> {
    let mut sections = Vec::new();
    let mut rest = skip_filler(after_name);
    while let Some(tail) = rest.strip_prefix('§') {
        let number: String = tail
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let number = number.trim_end_matches('.').to_string();
        if number.is_empty() {
            break; // `§N` as a placeholder in prose, not a citation
        }
        rest = &tail[number.len()..];
        sections.push(number);
        let list = [", ", " and ", "/", ",  "]
            .iter()
            .find_map(|sep| rest.strip_prefix(sep).filter(|r| r.starts_with('§')));
        match list {
            Some(next) => rest = next,
            None => break,
        }
    }
    sections
}

/// The anchor of a `#anchor` right after a document's name (or at a `](#` link).
fn cited_anchor(after_hash: &str) -> String {
    after_hash
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect()
}

/// Every citation in `text` of a document in `docs`: (document, `§N` or `#anchor`).
fn citations(text: &str, docs: &BTreeMap<String, Targets>) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for name in docs.keys() {
        for (at, _) in text.match_indices(name.as_str()) {
            let before = text[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_') {
                continue; // part of a longer name
            }
            let after = &text[at + name.len()..];
            if let Some(anchor) = after.strip_prefix('#') {
                found.push((name.clone(), format!("#{}", cited_anchor(anchor))));
            }
            for section in cited_sections(after) {
                found.push((name.clone(), format!("§{section}")));
            }
        }
    }
    found
}

fn check(docs: &BTreeMap<String, Targets>, doc: &str, cited: &str) -> bool {
    let targets = &docs[doc];
    match cited.strip_prefix('§') {
        Some(number) => targets.sections.contains(number),
        None => targets.anchors.contains(&cited[1..]),
    }
}

#[test]
fn citations_name_sections_that_exist_and_nothing_points_outside() {
    let root = root();
    let mut docs = BTreeMap::new();
    for entry in fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            docs.insert(name, targets(&fs::read_to_string(&path).unwrap()));
        }
    }
    let contract = &docs["contract.md"];
    assert!(
        contract.sections.contains("5") && contract.anchors.contains("5-conversions"),
        "docs/contract.md lost its numbered headings: {:?}",
        contract.sections
    );

    // Built from pieces so that this file does not match itself.
    let outside = [
        concat!("DESIGN", ".md"),
        concat!("..", "/shared"),
        concat!("shared", "/notes"),
        concat!("shared", "/reference"),
        concat!("shared", "/DESIGN"),
    ];
    let mut scanned = Vec::new();
    files(&root, &mut scanned);
    let (mut problems, mut contract_citations) = (Vec::new(), 0);
    for path in &scanned {
        let Ok(text) = fs::read_to_string(path) else {
            continue; // not UTF-8: not a source or a document
        };
        let shown = path.strip_prefix(&root).unwrap().display().to_string();
        for pattern in outside {
            if text.contains(pattern) {
                problems.push(format!(
                    "{shown}: mentions `{pattern}`, outside the repository"
                ));
            }
        }
        let mut cited = citations(&text, &docs);
        // A document's links to its own headings.
        if let Some(own) = path
            .parent()
            .filter(|dir| dir.ends_with("docs"))
            .and_then(|_| path.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|n| docs.contains_key(n))
        {
            for (at, _) in text.match_indices("](#") {
                cited.push((own.clone(), format!("#{}", cited_anchor(&text[at + 3..]))));
            }
        }
        for (doc, target) in cited {
            contract_citations += usize::from(doc == "contract.md");
            if !check(&docs, &doc, &target) {
                problems.push(format!(
                    "{shown}: cites docs/{doc} {target}, which does not exist"
                ));
            }
        }
    }
    assert!(
        scanned.len() > 100,
        "scanned only {} files under {}",
        scanned.len(),
        root.display()
    );
    assert!(
        contract_citations > 50,
        "found only {contract_citations} citations of docs/contract.md: is the scan broken?"
    );
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

#[test]
fn the_parser_reads_the_citation_forms_in_use() {
    let mut docs = BTreeMap::new();
    docs.insert(
        "contract.md".to_string(),
        targets("# T\n## 5. Conversions\n### 5.7 Dropout\n```\n## 9. Not a heading\n```\n"),
    );
    let cited = |text: &str| -> Vec<String> {
        citations(text, &docs)
            .into_iter()
            .map(|(_, target)| target)
            .collect()
    };
    assert_eq!(cited("see docs/contract.md §5.7."), ["§5.7"]);
    assert_eq!(cited("(`docs/contract.md` §5, §11)"), ["§5", "§11"]);
    assert_eq!(cited("(docs/contract.md §1 and §3)"), ["§1", "§3"]);
    assert_eq!(cited("docs/contract.md\n//! §5.7: rows"), ["§5.7"]);
    assert_eq!(cited("docs/contract.md#5-conversions"), ["#5-conversions"]);
    assert_eq!(cited("mycontract.md §5"), Vec::<String>::new());
    assert_eq!(
        cited("cite it as docs/contract.md §N"),
        Vec::<String>::new()
    );
    assert!(check(&docs, "contract.md", "§5.7"));
    assert!(
        !check(&docs, "contract.md", "§9"),
        "headings in code fences do not count"
    );
    assert!(check(&docs, "contract.md", "#57-dropout"));
    assert_eq!(
        slug("10. The data loader's streams"),
        "10-the-data-loaders-streams"
    );
    assert_eq!(
        slug("4. Derived keys: `fold_in` and split"),
        "4-derived-keys-fold_in-and-split"
    );
}
