//! The loss-curve PNG a demo ends with: the reference run drawn wide, the resumed run
//! thin on top of it (where they agree bit for bit, the thin line sits exactly in the
//! middle of the wide one), the held-out (validation) losses of a run that evaluates
//! as dots joined by a line, and the steps the resumed process ran shaded, starting
//! at the resume point. plotters' bitmap backend draws it.
//!
//! Text needs a font. Rather than linking fontconfig / freetype (absent on a fresh CI
//! machine), the font is loaded at run time from a few usual places; without one the
//! plot is drawn without text.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

/// Font files tried in order for labels.
const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/Library/Fonts/Arial.ttf",
    "C:\\Windows\\Fonts\\arial.ttf",
];

/// The wide reference line, and the thin line of this run drawn over it.
const REFERENCE: RGBColor = RGBColor(140, 180, 240);
const THIS_RUN: RGBColor = RGBColor(200, 30, 30);
/// The validation losses.
const VALIDATION: RGBColor = RGBColor(30, 120, 40);
/// The shading of the steps a resumed process ran.
const RESUMED: RGBColor = RGBColor(255, 200, 80);

/// Registers the first font found as "sans-serif"; true on success.
fn register_font() -> bool {
    FONT_PATHS.iter().any(|path| {
        std::fs::read(path).is_ok_and(|bytes| {
            // plotters keeps fonts for the life of the process; leaking one file is fine.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
        })
    })
}

/// What to draw: this run's whole history (restored steps first), the run it is
/// compared with, and the step a resumed run continued after.
pub struct Curves<'a> {
    /// The chart's caption.
    pub title: &'a str,
    /// The legend's name of this run.
    pub name: &'a str,
    /// Every step of this run, restored ones included.
    pub history: &'a [(u64, f32)],
    /// The validation losses of the steps this process evaluated (may be empty).
    pub validation: &'a [(u64, f32)],
    /// The compared run (`--compare`) and its name.
    pub reference: Option<(&'a str, &'a BTreeMap<u64, f32>)>,
    /// The last step restored from the checkpoint, when this run was resumed.
    pub resumed_after: Option<u64>,
}

/// Draws `curves` into a 900x540 PNG at `path`. The loss axis is logarithmic when
/// every loss is positive, so the end of training, where the curves are compared,
/// is not squashed against the axis.
pub fn draw(path: &Path, curves: &Curves<'_>) -> Result<(), Box<dyn std::error::Error>> {
    let all = curves
        .history
        .iter()
        .chain(curves.validation)
        .copied()
        .chain(
            curves
                .reference
                .iter()
                .flat_map(|(_, r)| r.iter().map(|(&s, &l)| (s, l))),
        );
    let (mut max_step, mut lo, mut hi) = (1u64, f32::INFINITY, f32::NEG_INFINITY);
    for (step, loss) in all.filter(|(_, l)| l.is_finite()) {
        max_step = max_step.max(step);
        lo = lo.min(loss);
        hi = hi.max(loss);
    }
    if lo > hi {
        (lo, hi) = (0.0, 1.0);
    }
    let steps = 0u64..max_step + 1;
    if lo > 0.0 {
        let losses = (lo * 0.8..hi * 1.25).log_scale();
        render(
            path,
            curves,
            steps,
            losses,
            (lo * 0.8, hi * 1.25),
            "loss (log scale)",
        )
    } else {
        let pad = (hi - lo).max(f32::EPSILON) * 0.05;
        render(
            path,
            curves,
            steps,
            lo - pad..hi + pad,
            (lo - pad, hi + pad),
            "loss",
        )
    }
}

/// Draws on a chart whose loss axis is `losses` (linear or logarithmic), spanning
/// `(bottom, top)`.
fn render<Y>(
    path: &Path,
    curves: &Curves<'_>,
    steps: std::ops::Range<u64>,
    losses: Y,
    (bottom, top): (f32, f32),
    loss_label: &str,
) -> Result<(), Box<dyn std::error::Error>>
where
    Y: AsRangedCoord<Value = f32>,
    Y::CoordDescType: ValueFormatter<f32>,
{
    let text = register_font();
    let root = BitMapBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(20);
    if text {
        builder
            .caption(curves.title, ("sans-serif", 22))
            .x_label_area_size(40)
            .y_label_area_size(70);
    }
    let mut chart = builder.build_cartesian_2d(steps.clone(), losses)?;
    let mut mesh = chart.configure_mesh();
    mesh.light_line_style(WHITE.mix(0.0));
    if text {
        mesh.x_desc("step").y_desc(loss_label);
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw()?;
    if let Some(step) = curves.resumed_after {
        let shade = RESUMED.mix(0.25).filled();
        let area =
            chart.draw_series([Rectangle::new([(step, top), (steps.end, bottom)], shade)])?;
        if text {
            area.label(format!(
                "run by the resumed process, from the checkpoint of step {step}"
            ))
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 20, y + 6)], shade));
        }
        chart.draw_series(LineSeries::new(
            [(step, bottom), (step, top)],
            BLACK.stroke_width(2),
        ))?;
    }
    if let Some((name, reference)) = curves.reference {
        let series = chart.draw_series(LineSeries::new(
            reference.iter().map(|(&s, &l)| (s, l)),
            REFERENCE.stroke_width(7),
        ))?;
        if text {
            series.label(format!("{name} (compared)")).legend(|(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], REFERENCE.stroke_width(7))
            });
        }
    }
    if !curves.validation.is_empty() {
        let points = curves.validation.iter().copied();
        chart.draw_series(LineSeries::new(points.clone(), VALIDATION.stroke_width(2)))?;
        let dots = chart.draw_series(points.map(|p| Circle::new(p, 4, VALIDATION.filled())))?;
        if text {
            dots.label("validation loss (held out)")
                .legend(|(x, y)| Circle::new((x + 10, y), 4, VALIDATION.filled()));
        }
    }
    let series = chart.draw_series(LineSeries::new(
        curves.history.iter().copied(),
        THIS_RUN.stroke_width(2),
    ))?;
    if text {
        series
            .label(format!("{} (this run)", curves.name))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], THIS_RUN.stroke_width(2)));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .label_font(("sans-serif", 16))
            .draw()?;
    }
    root.present()?;
    Ok(())
}
