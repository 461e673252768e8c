//! The end of a run, the same for both demos (`train_resume` and `ddp_train`'s rank 0):
//! compare its rows with another run step for step and bit for bit, and plot the whole
//! history over that run. (The rows went to `--out` as the run went: `run::Progress`.)

use std::error::Error;
use std::path::Path;
use std::process::ExitCode;

use super::flags::RunFlags;
use super::{curves, plot};

/// Where a finished run's report goes: the `--out`, `--compare` and `--plot` flags.
pub struct Report<'a> {
    /// `--out`: this run's CSV, already written; names the run in the plot.
    pub out: Option<&'a Path>,
    /// `--compare`: another run's CSV to compare the rows with.
    pub compare: Option<&'a Path>,
    /// `--plot`: a PNG of the whole history (restored steps included).
    pub plot: Option<&'a Path>,
}

impl<'a> Report<'a> {
    /// The report the run's flags ask for.
    pub fn of(flags: &'a RunFlags) -> Self {
        Report {
            out: flags.out.as_deref(),
            compare: flags.compare.as_deref(),
            plot: flags.plot.as_deref(),
        }
    }

    /// Compares and plots. `rows` are the steps the run's CSV holds, `losses` the whole
    /// history (a resumed run's restored steps first), `val` the validation losses of
    /// the steps evaluated, `resumed_after` the step a resumed run started from. Exit
    /// code 1 when the comparison found a difference.
    pub fn finish(
        &self,
        rows: &[(u64, f32)],
        losses: &[f32],
        val: &[(u64, f32)],
        resumed_after: Option<u64>,
    ) -> Result<ExitCode, Box<dyn Error>> {
        let mut identical = None;
        let reference = match self.compare {
            Some(path) => Some((file_name(path), curves::read_csv(path)?)),
            None => None,
        };
        if let Some((name, reference)) = &reference {
            identical = Some(curves::compare(rows, reference, name));
        }
        if let Some(png) = self.plot {
            let history: Vec<(u64, f32)> = (1..).zip(losses.iter().copied()).collect();
            let name = self.out.map_or_else(|| "this run".to_string(), file_name);
            let title = match (&reference, identical) {
                (Some((other, _)), Some(true)) => format!("{name} and {other}: identical"),
                (Some((other, _)), _) => format!("{name} and {other}: they differ"),
                (None, _) => name.clone(),
            };
            let curves = plot::Curves {
                title: &title,
                name: &name,
                history: &history,
                validation: val,
                reference: reference.as_ref().map(|(n, r)| (n.as_str(), r)),
                resumed_after,
            };
            plot::draw(png, &curves).map_err(|e| format!("cannot draw {}: {e}", png.display()))?;
            println!("loss curves plotted: {}", png.display());
        }
        Ok(match identical {
            Some(false) => ExitCode::from(1),
            _ => ExitCode::SUCCESS,
        })
    }
}

/// The file name of `path` (all of it when it has none), for legends and tables.
fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}
