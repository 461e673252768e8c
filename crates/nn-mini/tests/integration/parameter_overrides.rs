//! `Module::visit_parameters` and `visit_parameters_mut` default to "no parameters", so
//! layers without any (`ReLU`, `Dropout`) need not write them. The risk of that default
//! is a layer that owns parameters and forgets to override them: its weights would never
//! be updated by an optimiser nor saved in a checkpoint, silently. This test closes that
//! gap: every `impl Module for T` in the workspace's crates whose struct `T` holds a
//! `Parameter` or another module (any type some `impl Module` is written for, or a
//! `dyn Module`) must override both visitors. And no layer may override the accessors
//! built on them (`parameters`, `named_parameters` and their `_mut` twins): one that did
//! could list other names or another order than its visitors, which checkpoints and
//! optimiser state are keyed by.

use std::path::{Path, PathBuf};

/// The `.rs` files under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The text from the `{` at or after `from` to its matching `}` (or up to the first `;`
/// when one comes before any `{`: a tuple or unit struct).
fn block(text: &str, from: usize) -> &str {
    let rest = &text[from..];
    let open = match (rest.find('{'), rest.find(';')) {
        (Some(open), Some(semi)) if semi < open => return &rest[..semi],
        (Some(open), _) => open,
        (None, Some(semi)) => return &rest[..semi],
        (None, None) => return rest,
    };
    let mut depth = 0usize;
    for (i, c) in rest[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return &rest[..open + i + 1];
                }
            }
            _ => {}
        }
    }
    rest
}

/// Whether `text[at..at + len]` is a whole word: no identifier character on either side.
fn is_word_at(text: &str, at: usize, len: usize) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let before = text[..at].chars().next_back().is_none_or(|c| !ident(c));
    let after = text[at + len..].chars().next().is_none_or(|c| !ident(c));
    before && after
}

/// Whether `text` contains `word` as a whole word.
fn has_word(text: &str, word: &str) -> bool {
    text.match_indices(word)
        .any(|(at, _)| is_word_at(text, at, word.len()))
}

/// The type names of the `impl Module for T` blocks in `source`, with each block's text.
fn module_impls(source: &str) -> Vec<(String, &str)> {
    let mut out = Vec::new();
    for (at, _) in source.match_indices("impl Module for ") {
        let name: String = source[at + "impl Module for ".len()..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        out.push((name, block(source, at)));
    }
    out
}

/// The accessors `Module` builds on the visitors; no layer may write its own.
const PROVIDED: [&str; 4] = [
    "fn parameters(",
    "fn parameters_mut(",
    "fn named_parameters(",
    "fn named_parameters_mut(",
];

/// The `impl Module` blocks of `sources` that hold parameters or modules without
/// overriding `visit_parameters` and `visit_parameters_mut` (as `file: type`), or that
/// override an accessor of [`PROVIDED`] (as `file: type overrides fn ...(`).
fn forgetful_layers(sources: &[(String, String)]) -> Vec<String> {
    let module_types: Vec<String> = sources
        .iter()
        .flat_map(|(_, s)| module_impls(s).into_iter().map(|(name, _)| name))
        .collect();
    let mut forgetful = Vec::new();
    for (file, source) in sources {
        for (name, body) in module_impls(source) {
            let header = format!("struct {name}");
            let Some(at) = source
                .match_indices(&header)
                .map(|(at, _)| at)
                .find(|&at| is_word_at(source, at, header.len()))
            else {
                continue;
            };
            let fields = block(source, at + "struct ".len() + name.len());
            let holds_parameters = has_word(fields, "Parameter")
                || fields.contains("dyn Module")
                || module_types.iter().any(|m| has_word(fields, m));
            // Written out, or both from nn-mini's `visit_weight_and_bias!()`.
            let overrides = (body.contains("fn visit_parameters<")
                && body.contains("fn visit_parameters_mut<"))
                || body.contains("visit_weight_and_bias!()");
            if holds_parameters && !overrides {
                forgetful.push(format!("{file}: {name}"));
            }
            for accessor in PROVIDED.iter().filter(|a| body.contains(*a)) {
                forgetful.push(format!("{file}: {name} overrides {accessor}"));
            }
        }
    }
    forgetful
}

#[test]
fn every_module_holding_parameters_overrides_parameters() {
    let crates = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    rust_files(&crates, &mut files);
    // This file's fixture is forgetful on purpose.
    files.retain(|f| !f.ends_with(file!().rsplit('/').next().expect("a file name")));
    let sources: Vec<(String, String)> = files
        .iter()
        .map(|f| {
            let name = f.strip_prefix(&crates).unwrap_or(f).display().to_string();
            (name, std::fs::read_to_string(f).unwrap())
        })
        .collect();
    let impls = sources
        .iter()
        .map(|(_, s)| module_impls(s).len())
        .sum::<usize>();
    assert!(
        impls >= 5,
        "found only {impls} impl Module blocks: is the scan broken?"
    );
    let forgetful = forgetful_layers(&sources);
    assert!(
        forgetful.is_empty(),
        "these modules hold parameters (or layers) but keep the no-parameter defaults of \
         Module::visit_parameters / visit_parameters_mut, so no optimiser or checkpoint \
         would see them, or override an accessor built on the visitors:\n{}",
        forgetful.join("\n")
    );
}

/// The check itself catches a forgetful layer, a forgetful container, one holding a
/// `dyn Module` and one that writes an accessor of its own (even beside the visitors),
/// and lets parameterless layers and overriding ones pass.
#[test]
fn the_check_finds_a_layer_that_forgets() {
    let source = r"
        pub struct Scale { weight: Parameter }
        impl Module for Scale {
            fn forward(&mut self, x: &Tensor, _: bool) -> Result<Tensor> { todo!() }
        }
        pub struct Wrapper { inner: Scale }
        impl Module for Wrapper {
            fn forward(&mut self, x: &Tensor, _: bool) -> Result<Tensor> { todo!() }
        }
        pub struct Boxed(Box<dyn Module>);
        impl Module for Boxed {
            fn forward(&mut self, x: &Tensor, _: bool) -> Result<Tensor> { todo!() }
        }
        pub struct Square { saved: Option<Tensor> }
        impl Module for Square {
            fn forward(&mut self, x: &Tensor, _: bool) -> Result<Tensor> { todo!() }
        }
        pub struct Bias { bias: Parameter }
        impl Module for Bias {
            fn visit_parameters<'a>(&'a self, p: &str, f: &mut dyn FnMut(String, &'a Parameter)) {}
            fn visit_parameters_mut<'a>(&'a mut self, p: &str, f: &mut dyn FnMut(String, &'a mut Parameter)) {}
        }
        pub struct Old { bias: Parameter }
        impl Module for Old {
            fn parameters(&self) -> Vec<&Parameter> { vec![&self.bias] }
            fn parameters_mut(&mut self) -> Vec<&mut Parameter> { vec![&mut self.bias] }
        }
        pub struct Renamed { inner: Bias }
        impl Module for Renamed {
            fn visit_parameters<'a>(&'a self, p: &str, f: &mut dyn FnMut(String, &'a Parameter)) {}
            fn visit_parameters_mut<'a>(&'a mut self, p: &str, f: &mut dyn FnMut(String, &'a mut Parameter)) {}
            fn named_parameters(&self) -> Vec<(String, &Parameter)> { vec![] }
        }
    ";
    let found = forgetful_layers(&[("fixture.rs".into(), source.into())]);
    assert_eq!(
        found,
        [
            "fixture.rs: Scale",
            "fixture.rs: Wrapper",
            "fixture.rs: Boxed",
            "fixture.rs: Old",
            "fixture.rs: Old overrides fn parameters(",
            "fixture.rs: Old overrides fn parameters_mut(",
            "fixture.rs: Renamed overrides fn named_parameters(",
        ]
    );
}
