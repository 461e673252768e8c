//! `docs/determinism.md` holds the table of ops with a nondeterministic fast path
//! verbatim as `ditto::determinism_table()` generates it, so the docs cannot drift from
//! the code. After changing an entry, regenerate the table with
//! `DITTO_UPDATE_DOCS=1 cargo test -p ditto --test integration determinism_docs`.

use std::path::Path;

const BEGIN: &str = "<!-- BEGIN GENERATED TABLE: ditto::determinism_table() -->\n";
const END: &str = "<!-- END GENERATED TABLE -->";

#[test]
fn the_docs_hold_the_generated_table() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/determinism.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text
        .find(BEGIN)
        .expect("docs/determinism.md lacks the BEGIN marker")
        + BEGIN.len();
    let end = start
        + text[start..]
            .find(END)
            .expect("docs/determinism.md lacks the END marker");
    let table = ditto::determinism_table();
    if text[start..end] == table {
        return;
    }
    if std::env::var_os("DITTO_UPDATE_DOCS").is_some() {
        let updated = format!("{}{table}{}", &text[..start], &text[end..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    panic!(
        "docs/determinism.md's table differs from ditto::determinism_table(); regenerate it \
         with DITTO_UPDATE_DOCS=1 cargo test -p ditto --test integration determinism_docs\n\nexpected:\n{table}"
    );
}

#[test]
fn every_op_with_a_fast_path_is_in_the_table() {
    let table = ditto::determinism_table();
    let ops = ditto::nondeterministic_ops();
    assert_eq!(table.lines().count(), 2 + ops.len());
    for (op, device) in [
        ("index_add", "CPU"),
        ("index_add", "CUDA"),
        ("scatter_add", "CUDA"),
        ("sum", "CUDA"),
        ("DataLoader(in_order = false)", "CPU"),
    ] {
        assert!(
            ops.iter().any(|e| e.op == op && e.devices == device),
            "{op} on {device} is missing"
        );
        assert!(table.contains(&format!("| `{op}` | {device} |")), "{table}");
    }
}
