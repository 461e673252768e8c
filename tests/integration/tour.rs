//! The reading tour (`docs/tour.md`) must not rot: every stop names a file that exists
//! and, where it names an item, an item that file defines; and where a stop says
//! "Called from: `file` · `fn`", that function of that file calls the stop's item, so
//! the path the tour walks is the path the code takes. A rename, a move or a rewired
//! call that forgets the tour fails here, with the stop's line and what is missing.
//!
//! A stop is a level-3 heading whose first code span is a repository path and whose
//! optional second code span is an item in it:
//!
//! ```text
//! ### 3. `crates/rng-gen/src/generator.rs` · `Generator::reserve`
//! ```

use std::path::{Path, PathBuf};

/// One stop of the tour: its heading line number, path and optional item, and the
/// `(file, function)` its "Called from:" line names, if any.
#[derive(Debug)]
struct Stop {
    line: usize,
    path: String,
    item: Option<String>,
    caller: Option<(String, String)>,
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The text between pairs of backticks on `line`, in order.
fn code_spans(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

fn looks_like_path(span: &str) -> bool {
    !span.contains(' ') && (span.contains('/') || span.contains('.')) && !span.contains("::")
}

fn stops(tour: &str) -> Vec<Stop> {
    let mut out: Vec<Stop> = Vec::new();
    for (i, line) in tour.lines().enumerate() {
        if let Some(called) = line.strip_prefix("Called from: ") {
            if let (Some(stop), [file, function, ..]) = (out.last_mut(), &code_spans(called)[..]) {
                stop.caller = Some((file.to_string(), function.to_string()));
            }
            continue;
        }
        let Some(heading) = line.strip_prefix("### ") else {
            continue;
        };
        let spans = code_spans(heading);
        let Some(first) = spans.first() else { continue };
        if !looks_like_path(first) {
            continue;
        }
        out.push(Stop {
            line: i + 1,
            path: first.to_string(),
            item: spans.get(1).map(|s| s.to_string()),
            caller: None,
        });
    }
    out
}

/// Whether `source` (a file of kind `ext`) defines `name`, the last segment of an item
/// path such as `Generator::reserve` or `run_cuda()`.
fn defines(source: &str, ext: &str, name: &str) -> bool {
    let words: Vec<&str> = source
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '!'))
        .filter(|w| !w.is_empty())
        .collect();
    if ext != "rs" {
        return words.contains(&name);
    }
    const KEYWORDS: [&str; 10] = [
        "fn",
        "struct",
        "enum",
        "trait",
        "type",
        "const",
        "static",
        "mod",
        "macro_rules!",
        "union",
    ];
    let defined_by_keyword = words
        .windows(2)
        .any(|w| w[1] == name && KEYWORDS.contains(&w[0]));
    // Enum variants and struct fields: `Name {`, `Name(`, `Name,` or `name:` at the start
    // of a trimmed line.
    let variant_or_field = source.lines().map(str::trim_start).any(|l| {
        l.strip_prefix(name)
            .is_some_and(|rest| rest.starts_with([' ', '(', ',', '{', ':']) || rest.is_empty())
            || l.strip_prefix("pub ")
                .and_then(|l| l.strip_prefix(name))
                .is_some_and(|rest| rest.starts_with(':'))
    });
    defined_by_keyword || variant_or_field
}

/// The body of Rust function `function` in `source`: from its `fn` line to the next
/// line that closes at the indentation it opened at (rustfmt's layout).
fn function_body<'a>(source: &'a str, function: &str) -> Option<&'a str> {
    let start = source.lines().position(|l| {
        let words: Vec<&str> = l
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .collect();
        words.windows(2).any(|w| w == ["fn", function])
    })?;
    let lines: Vec<&str> = source.lines().collect();
    let indent = lines[start].len() - lines[start].trim_start().len();
    let end = (start + 1..lines.len()).find(|&j| {
        lines[j].len() - lines[j].trim_start().len() == indent && lines[j].trim() == "}"
    })?;
    let from = lines[..start].iter().map(|l| l.len() + 1).sum::<usize>();
    let to = lines[..=end].iter().map(|l| l.len() + 1).sum::<usize>();
    source.get(from..to.min(source.len()))
}

/// Errors unless the stop's "Called from:" function calls the stop's item (a method
/// call `.name(` or a path call `name(` / `name::<`).
fn check_caller(root: &Path, stop: &Stop) -> Result<(), String> {
    let (Some((file, function)), Some(item)) = (&stop.caller, &stop.item) else {
        return Ok(());
    };
    let source = read(&root.join(file));
    let Some(body) = function_body(&source, function) else {
        return Err(format!(
            "line {}: `{file}` has no function `{function}` (its \"Called from:\" line)",
            stop.line
        ));
    };
    let name = item
        .trim_end_matches("()")
        .rsplit("::")
        .next()
        .unwrap_or(item);
    let calls = [
        format!(".{name}("),
        format!("{name}("),
        format!("{name}::<"),
    ];
    if !calls.iter().any(|c| body.contains(c.as_str())) {
        return Err(format!(
            "line {}: `{file}` · `{function}` does not call `{name}`, as the tour says",
            stop.line
        ));
    }
    Ok(())
}

fn check_stop(root: &Path, stop: &Stop) -> Result<(), String> {
    let path = root.join(&stop.path);
    if !path.is_file() {
        return Err(format!(
            "line {}: `{}` does not exist",
            stop.line, stop.path
        ));
    }
    let Some(item) = &stop.item else {
        return Ok(());
    };
    let source = read(&path);
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let segments: Vec<&str> = item
        .trim_end_matches("()")
        .split("::")
        .map(|s| s.split('<').next().unwrap_or(s))
        .collect();
    let (name, owners) = segments.split_last().expect("split yields one segment");
    if !defines(&source, ext, name) {
        return Err(format!(
            "line {}: `{}` does not define `{name}` (from `{item}`)",
            stop.line, stop.path
        ));
    }
    for owner in owners {
        if !source.contains(owner) {
            return Err(format!(
                "line {}: `{}` never mentions `{owner}` (from `{item}`)",
                stop.line, stop.path
            ));
        }
    }
    Ok(())
}

#[test]
fn every_stop_of_the_tour_names_a_file_and_item_that_exist() {
    let root = repo_root();
    let tour = read(&root.join("docs/tour.md"));
    let stops = stops(&tour);
    assert!(stops.len() >= 20, "the tour has only {} stops", stops.len());
    let broken: Vec<String> = stops
        .iter()
        .filter_map(|s| {
            check_stop(&root, s)
                .and_then(|()| check_caller(&root, s))
                .err()
        })
        .collect();
    assert!(broken.is_empty(), "docs/tour.md:\n{}", broken.join("\n"));
}

#[test]
fn the_tour_tells_three_stories_with_numbered_stops() {
    let tour = read(&repo_root().join("docs/tour.md"));
    let stories: Vec<&str> = tour.lines().filter(|l| l.starts_with("## Story")).collect();
    assert_eq!(
        stories.len(),
        3,
        "expected three `## Story` sections, found {stories:?}"
    );
    // Stops are numbered 1, 2, 3, ... within each story, so a reader can say "stop 7".
    for story in tour.split("\n## Story").skip(1) {
        let numbers: Vec<u32> = story
            .lines()
            .filter_map(|l| l.strip_prefix("### "))
            .filter_map(|h| h.split('.').next()?.trim().parse().ok())
            .collect();
        let expected: Vec<u32> = (1..=numbers.len() as u32).collect();
        assert_eq!(numbers, expected, "stops out of order in a story");
    }
}

#[test]
fn the_readme_points_to_the_tour_before_any_other_document() {
    let readme = read(&repo_root().join("README.md"));
    let first_doc = readme.find("docs/").expect("README links no document");
    assert!(
        readme[first_doc..].starts_with("docs/tour.md"),
        "README's first link into docs/ must be the tour"
    );
}

#[test]
fn the_checker_itself_sees_a_missing_item_and_a_missing_file() {
    let root = repo_root();
    let tour =
        "### 1. `README.md`\n### 2. `crates/rng-gen/src/generator.rs` · `Generator::reserve`\n\
                ### 3. `crates/rng-gen/src/generator.rs` · `Generator::no_such_fn`\n\
                ### 4. `no/such/file.rs`\n";
    let results: Vec<bool> = stops(tour)
        .iter()
        .map(|s| check_stop(&root, s).is_ok())
        .collect();
    assert_eq!(results, [true, true, false, false]);
}

#[test]
fn the_checker_itself_sees_a_call_that_is_not_made() {
    let root = repo_root();
    let tour = "### 1. `crates/nn-mini/src/train/run.rs` · `Run::step_deferred`\n\
                Called from: `examples/common/run.rs` · `train`\n\
                ### 2. `crates/nn-mini/src/train/run.rs` · `Run::step_deferred`\n\
                Called from: `examples/common/run.rs` · `start`\n\
                ### 3. `crates/nn-mini/src/train/run.rs` · `Run::step_deferred`\n\
                Called from: `examples/common/run.rs` · `no_such_fn`\n";
    let stops = stops(tour);
    let results: Vec<bool> = stops
        .iter()
        .map(|s| check_caller(&root, s).is_ok())
        .collect();
    assert_eq!(results, [true, false, false], "{stops:?}");
}
