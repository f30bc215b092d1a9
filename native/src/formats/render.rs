//! Flamegraph SVGs from folded stacks, through inferno.

use std::str::FromStr;

use inferno::flamegraph::{self, color::Palette, Direction};

/// What a rendered flamegraph looks like.
#[derive(Debug, Clone)]
pub struct RenderOptions {
    pub title: String,
    pub subtitle: Option<String>,
    pub inverted: bool,
    pub palette: String,
    pub min_width: f64,
    pub count_name: String,
    pub width: Option<usize>,
    pub negate: bool,
    pub factor: f64,
}

impl RenderOptions {
    fn to_inferno(&self) -> Result<flamegraph::Options<'static>, String> {
        let mut opts = flamegraph::Options::default();
        opts.colors = Palette::from_str(&self.palette)
            .map_err(|_| format!("unknown palette {:?}", self.palette))?;
        opts.title = self.title.clone();
        opts.subtitle = self.subtitle.clone();
        opts.direction = if self.inverted {
            Direction::Inverted
        } else {
            Direction::Straight
        };
        if self.min_width.is_nan() || self.min_width < 0.0 {
            return Err(format!("min_width must be >= 0, not {}", self.min_width));
        }
        opts.min_width = self.min_width;
        opts.count_name = self.count_name.clone();
        opts.image_width = self.width;
        opts.negate_differentials = self.negate;
        if self.factor.is_nan() || self.factor <= 0.0 {
            return Err(format!("factor must be > 0, not {}", self.factor));
        }
        opts.factor = self.factor;
        opts.hash = true;
        Ok(opts)
    }
}

/// Renders folded lines (`a;b;c 12`, or `a;b;c 10 12` for a differential) into an SVG string.
pub fn render(lines: &[String], options: &RenderOptions) -> Result<String, String> {
    let mut opts = options.to_inferno()?;
    let mut sorted: Vec<&str> = lines
        .iter()
        .map(|l| l.trim_end_matches(['\n', '\r']))
        .filter(|l| !l.trim().is_empty())
        .collect();
    if sorted.is_empty() {
        return Err("no stacks to render".into());
    }
    sorted.sort_unstable();
    let mut out = Vec::new();
    flamegraph::from_lines(&mut opts, sorted, &mut out).map_err(|e| e.to_string())?;
    String::from_utf8(out).map_err(|e| e.to_string())
}
