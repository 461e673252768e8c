//! The end of a run, the same for both demos (`train_resume` and `ddp_train`'s rank 0):
//! write this run's rows, compare them with another run step for step and bit for bit,
//! and plot the whole history over that run.

use std::error::Error;
use std::path::Path;
use std::process::ExitCode;

use crate::{curves, plot};

/// Where a finished run's report goes: the `--out`, `--compare` and `--plot` flags.
pub struct Report<'a> {
    /// `--out`: this run's rows as CSV (a resumed run writes only the steps it ran).
    pub out: Option<&'a Path>,
    /// `--compare`: another run's CSV to compare the rows with.
    pub compare: Option<&'a Path>,
    /// `--plot`: a PNG of the whole history (restored steps included).
    pub plot: Option<&'a Path>,
}

impl Report<'_> {
    /// Writes, compares and plots. `rows` are the steps this process ran, `losses` the
    /// whole history (a resumed run's restored steps first), `resumed_after` the step a
    /// resumed run started from. Exit code 1 when the comparison found a difference.
    pub fn finish(
        &self,
        rows: &[(u64, f32)],
        losses: &[f32],
        resumed_after: Option<u64>,
    ) -> Result<ExitCode, Box<dyn Error>> {
        if let Some(out) = self.out {
            curves::write_csv(out, rows)?;
        }
        let mut code = ExitCode::SUCCESS;
        let reference = match self.compare {
            Some(path) => {
                let name = path.file_name().map_or_else(
                    || path.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                );
                Some((name, curves::read_csv(path)?))
            }
            None => None,
        };
        if let Some((name, reference)) = &reference {
            if !curves::compare(rows, reference, name) {
                code = ExitCode::from(1);
            }
        }
        if let Some(png) = self.plot {
            let history: Vec<(u64, f32)> = (1..).zip(losses.iter().copied()).collect();
            let reference = reference.as_ref().map(|(n, r)| (n.as_str(), r));
            plot::draw(png, &history, reference, resumed_after)
                .map_err(|e| format!("cannot draw {}: {e}", png.display()))?;
            println!("plotted {}", png.display());
        }
        Ok(code)
    }
}
