//! Loss curves as CSV (`step,loss`, or `step,loss,val_loss` for a run that evaluates
//! on held-out data), and the side-by-side comparison of two of them.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// A CSV that cannot be read or parsed.
#[derive(Debug)]
pub enum CsvError {
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    Parse {
        path: PathBuf,
        line: usize,
        reason: String,
    },
}

impl fmt::Display for CsvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CsvError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            CsvError::Parse { path, line, reason } => {
                write!(f, "{}:{line}: {reason}", path.display())
            }
        }
    }
}

impl std::error::Error for CsvError {}

/// A loss curve written as the run goes: the header and any earlier rows at once, then
/// each row as it comes, flushed to the file, so that the file on disk is the curve so
/// far (a killed run keeps its rows; a path that cannot be written fails before the
/// first step, when the header is written). Rows are `step,loss`, with a third column
/// `val_loss` (empty where the run did not evaluate) when asked for; `{:?}` prints the
/// shortest decimal that parses back to the same f32, so the file round-trips bit for
/// bit.
pub struct CurveWriter {
    path: PathBuf,
    file: BufWriter<File>,
    val_column: bool,
}

impl CurveWriter {
    /// Creates (or truncates) `path` and writes the header and `earlier` rows (with an
    /// empty `val_loss` when `val_column`).
    pub fn create(path: &Path, earlier: &[(u64, f32)], val_column: bool) -> Result<Self, CsvError> {
        let file = File::create(path).map_err(|source| CsvError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut writer = CurveWriter {
            path: path.to_path_buf(),
            file: BufWriter::new(file),
            val_column,
        };
        let header: &[u8] = match val_column {
            true => b"step,loss,val_loss\n",
            false => b"step,loss\n",
        };
        writer.write(|file| file.write_all(header))?;
        for &(step, loss) in earlier {
            writer.append(step, loss, None)?;
        }
        Ok(writer)
    }

    /// Appends one row and flushes it to the file; `val` goes in the `val_loss` column
    /// (which a file created without one does not have).
    pub fn append(&mut self, step: u64, loss: f32, val: Option<f32>) -> Result<(), CsvError> {
        let val = match (self.val_column, val) {
            (false, _) => String::new(),
            (true, None) => ",".to_string(),
            (true, Some(v)) => format!(",{v:?}"),
        };
        self.write(|file| writeln!(file, "{step},{loss:?}{val}"))
    }

    fn write(
        &mut self,
        rows: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
    ) -> Result<(), CsvError> {
        rows(&mut self.file)
            .and_then(|()| self.file.flush())
            .map_err(|source| CsvError::Io {
                path: self.path.clone(),
                source,
            })
    }
}

/// Reads the training losses of a file written by a [`CurveWriter`] (a `val_loss`
/// column is checked to be empty or a number, and left out).
pub fn read_csv(path: &Path) -> Result<BTreeMap<u64, f32>, CsvError> {
    let text = std::fs::read_to_string(path).map_err(|source| CsvError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let bad = |line: usize, reason: String| CsvError::Parse {
        path: path.to_path_buf(),
        line,
        reason,
    };
    let mut lines = text.lines().enumerate();
    let columns = match lines.next() {
        Some((_, "step,loss")) => 2,
        Some((_, "step,loss,val_loss")) => 3,
        _ => {
            return Err(bad(
                1,
                "expected the header `step,loss` or `step,loss,val_loss`".into(),
            ))
        }
    };
    let mut rows = BTreeMap::new();
    for (i, line) in lines {
        let fields: Vec<&str> = line.split(',').collect();
        let [step, loss, ref rest @ ..] = fields[..] else {
            return Err(bad(
                i + 1,
                format!("expected {columns} columns, got {line:?}"),
            ));
        };
        if fields.len() != columns
            || rest
                .iter()
                .any(|v| !v.is_empty() && v.parse::<f32>().is_err())
        {
            return Err(bad(
                i + 1,
                format!("expected {columns} columns, got {line:?}"),
            ));
        }
        let step: u64 = step
            .parse()
            .map_err(|_| bad(i + 1, format!("bad step {step:?}")))?;
        let loss: f32 = loss
            .parse()
            .map_err(|_| bad(i + 1, format!("bad loss {loss:?}")))?;
        if rows.insert(step, loss).is_some() {
            return Err(bad(i + 1, format!("step {step} appears twice")));
        }
    }
    Ok(rows)
}

/// Prints `rows` next to the same steps of `reference` and says whether every loss is
/// bit-identical. Long curves are abbreviated to about 20 rows, but every row that
/// differs is printed. No overlapping step counts as not identical.
pub fn compare(rows: &[(u64, f32)], reference: &BTreeMap<u64, f32>, reference_name: &str) -> bool {
    let overlap: Vec<(u64, f32, f32)> = rows
        .iter()
        .filter_map(|&(step, loss)| reference.get(&step).map(|&r| (step, loss, r)))
        .collect();
    let every = overlap.len().div_ceil(20).max(1);
    if every > 1 {
        println!("(one step in {every} shown, plus the last one and every step that differs)");
    }
    println!(
        "{:>6} | {:>14} | {:>14}",
        "step", "this run", reference_name
    );
    let mut differing = 0;
    for (i, &(step, loss, r)) in overlap.iter().enumerate() {
        let same = loss.to_bits() == r.to_bits();
        differing += usize::from(!same);
        if same && i % every != 0 && i + 1 != overlap.len() {
            continue;
        }
        let mark = if same { "" } else { "   <- differs" };
        println!(
            "{step:>6} | {:>14} | {:>14}{mark}",
            format!("{loss:?}"),
            format!("{r:?}")
        );
    }
    let identical = !overlap.is_empty() && differing == 0;
    match (overlap.first(), overlap.last()) {
        (Some(first), Some(last)) => println!(
            "compared {} steps ({}..={}): {differing} differ",
            overlap.len(),
            first.0,
            last.0
        ),
        _ => println!("no step of this run appears in {reference_name}"),
    }
    println!("identical: {}", if identical { "yes" } else { "no" });
    identical
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_round_trips_every_bit_and_reports_bad_lines() {
        let dir = std::env::temp_dir().join(format!("ditto-curves-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("l.csv");
        let rows: Vec<(u64, f32)> = (1..=50u64)
            .map(|s| (s, f32::from_bits(0x3e00_0000 + s as u32 * 7919)))
            .collect();
        let mut writer = CurveWriter::create(&path, &rows[..20], false).unwrap();
        for &(step, loss) in &rows[20..] {
            writer.append(step, loss, None).unwrap();
        }
        let back = read_csv(&path).unwrap();
        assert!(rows.iter().all(|(s, l)| back[s].to_bits() == l.to_bits()));
        assert!(compare(&rows, &back, "same"));
        let mut changed = back.clone();
        changed.insert(7, f32::from_bits(rows[6].1.to_bits() + 1));
        assert!(!compare(&rows, &changed, "one ulp off"));
        assert!(!compare(&rows, &BTreeMap::new(), "empty"));
        std::fs::write(&path, "step,loss\n1,0.5\n2,zero\n").unwrap();
        assert!(read_csv(&path).unwrap_err().to_string().contains(":3:"));
        // With a val_loss column: the same training losses, whatever it holds.
        let mut writer = CurveWriter::create(&path, &rows[..2], true).unwrap();
        writer.append(3, rows[2].1, Some(1.25)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("step,loss,val_loss\n1,") && text.ends_with(",1.25\n"));
        let back = read_csv(&path).unwrap();
        assert!(compare(&rows[..3], &back, "with val"));
        std::fs::write(&path, "step,loss,val_loss\n1,0.5\n").unwrap();
        assert!(read_csv(&path).unwrap_err().to_string().contains(":2:"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
