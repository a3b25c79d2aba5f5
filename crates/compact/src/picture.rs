//! A picture of one sample ([`Picture`], `compact inspect --row ID --png FILE`): for a volume,
//! the three orthogonal middle slices of each channel side by side (a mask field of the
//! volume's grid overlaid in red), one colour scale for the field with its bar and bounds, and
//! a title (id, label, version, field). Pure: the row's values in, RGB pixels out; the PNG
//! is written by image-rs's encoder, the text drawn with a public-domain 8×8 bitmap font.

use crate::CompactError;

/// An RGB picture, 8 bits a channel, row after row.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Picture {
    /// Pixels a row.
    pub width: u32,
    /// Rows.
    pub height: u32,
    /// `width × height × 3` bytes.
    pub rgb: Vec<u8>,
}

/// What a picture shows: a tensor's values (C order) and shape, a mask of its grid, a title.
pub(crate) struct Scene<'a> {
    pub values: &'a [f64],
    pub shape: &'a [usize],
    /// A mask of the volume's spatial grid (its first three axes), nonzero where set.
    pub mask: Option<&'a [f64]>,
    pub title: String,
}

/// Channels drawn at most (one row of slices each).
const MOST_CHANNELS: usize = 16;
/// A slice's longest side is scaled to about this many pixels.
const TILE: usize = 128;
const MARGIN: usize = 8;
const GAP: usize = 4;
const BAR_WIDTH: usize = 12;
const BACKGROUND: [u8; 3] = [24, 24, 28];
const INK: [u8; 3] = [235, 235, 235];
const NAN: [u8; 3] = [128, 128, 128];

/// viridis at nine even steps (matplotlib's), interpolated between.
const VIRIDIS: [[f64; 3]; 9] = [
    [68.0, 1.0, 84.0],
    [71.0, 44.0, 122.0],
    [59.0, 81.0, 139.0],
    [44.0, 113.0, 142.0],
    [33.0, 144.0, 141.0],
    [39.0, 173.0, 129.0],
    [92.0, 200.0, 99.0],
    [170.0, 220.0, 50.0],
    [253.0, 231.0, 37.0],
];

/// The colour of `t` in `0..=1` on viridis.
fn colour(t: f64) -> [u8; 3] {
    let t = t.clamp(0.0, 1.0) * (VIRIDIS.len() - 1) as f64;
    let (i, f) = (t.floor() as usize, t.fract());
    let (a, b) = (VIRIDIS[i], VIRIDIS[(i + 1).min(VIRIDIS.len() - 1)]);
    std::array::from_fn(|k| (a[k] + (b[k] - a[k]) * f).round() as u8)
}

/// A canvas to draw on.
struct Canvas {
    width: usize,
    height: usize,
    rgb: Vec<u8>,
}

impl Canvas {
    fn new(width: usize, height: usize) -> Canvas {
        let rgb = BACKGROUND.repeat(width * height);
        Canvas { width, height, rgb }
    }

    fn set(&mut self, x: usize, y: usize, c: [u8; 3]) {
        if x < self.width && y < self.height {
            let at = 3 * (y * self.width + x);
            self.rgb[at..at + 3].copy_from_slice(&c);
        }
    }

    /// `text` at (`x`, `y`), each 8×8 glyph scaled by `scale`; characters the font lacks as `?`.
    fn text(&mut self, x: usize, y: usize, text: &str, scale: usize) {
        for (i, ch) in text.chars().enumerate() {
            let code = if ch.is_ascii() {
                ch as usize
            } else {
                '?' as usize
            };
            let glyph = font8x8::legacy::BASIC_LEGACY[code];
            for (row, bits) in glyph.iter().enumerate() {
                for col in 0..8 {
                    if bits >> col & 1 == 1 {
                        for (dy, dx) in (0..scale).flat_map(|dy| (0..scale).map(move |dx| (dy, dx)))
                        {
                            let px = x + (i * 8 + col) * scale + dx;
                            self.set(px, y + row * scale + dy, INK);
                        }
                    }
                }
            }
        }
    }
}

/// The volume's spatial axes (three, a plane's two with a depth of one) and its channels.
fn grid(shape: &[usize]) -> Result<([usize; 3], usize), String> {
    match shape {
        [x, y] => Ok(([*x, *y, 1], 1)),
        [x, y, z] => Ok(([*x, *y, *z], 1)),
        [x, y, z, rest @ ..] => Ok(([*x, *y, *z], rest.iter().product())),
        _ => Err(format!(
            "a picture needs a field of two axes or more, this one is {shape:?}"
        )),
    }
}

/// One slice: its size (rows, columns) and the value index of each pixel.
struct Slice {
    rows: usize,
    cols: usize,
    at: Box<dyn Fn(usize, usize) -> [usize; 3]>,
}

/// The middle slices of a volume of spatial size `[x, y, z]`: across z, y and x (a plane's one).
fn slices([x, y, z]: [usize; 3]) -> Vec<Slice> {
    let (mx, my, mz) = (x / 2, y / 2, z / 2);
    let mut out = vec![Slice {
        rows: x,
        cols: y,
        at: Box::new(move |r, c| [r, c, mz]),
    }];
    if z > 1 {
        out.push(Slice {
            rows: x,
            cols: z,
            at: Box::new(move |r, c| [r, my, c]),
        });
        out.push(Slice {
            rows: y,
            cols: z,
            at: Box::new(move |r, c| [mx, r, c]),
        });
    }
    out
}

/// Draws `scene` (see the module docs).
pub(crate) fn render(scene: &Scene<'_>) -> Result<Picture, String> {
    let (space, channels) = grid(scene.shape)?;
    let [sx, sy, sz] = space;
    let count = sx * sy * sz * channels;
    if scene.values.len() != count || count == 0 {
        return Err(format!(
            "{} values for a shape of {count}",
            scene.values.len()
        ));
    }
    let mask = scene.mask.filter(|m| m.len() == sx * sy * sz);
    let finite = scene.values.iter().copied().filter(|v| v.is_finite());
    let (lo, hi) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    let span = if hi > lo { hi - lo } else { 1.0 };
    let slices = slices(space);
    let scale = (TILE / sx.max(sy).max(sz).max(1)).max(1);
    let shown = channels.min(MOST_CHANNELS);
    let row_height = slices.iter().map(|s| s.rows).max().unwrap_or(1) * scale;
    let tiles_width: usize = slices.iter().map(|s| s.cols * scale + GAP).sum();
    let title_height = 2 * 8 + GAP;
    let notes = if shown < channels { 2 } else { 1 };
    let grid_height = shown * (row_height + GAP);
    let width = MARGIN + tiles_width + GAP + BAR_WIDTH + GAP + 8 * 12 + MARGIN;
    let height = MARGIN + title_height + grid_height + notes * 10 + MARGIN;
    let mut canvas = Canvas::new(width.max(scene.title.len() * 16 + 2 * MARGIN), height);
    canvas.text(MARGIN, MARGIN, &scene.title, 2);
    let top = MARGIN + title_height;
    for c in 0..shown {
        let mut left = MARGIN;
        let y0 = top + c * (row_height + GAP);
        for slice in &slices {
            for r in 0..slice.rows {
                for col in 0..slice.cols {
                    let [x, y, z] = (slice.at)(r, col);
                    let v = scene.values[((x * sy + y) * sz + z) * channels + c];
                    let mut px = match v.is_finite() {
                        true => colour((v - lo) / span),
                        false => NAN,
                    };
                    if mask.is_some_and(|m| m[(x * sy + y) * sz + z] != 0.0) {
                        px = std::array::from_fn(|k| {
                            let red = [230.0, 40.0, 40.0][k];
                            (0.55 * f64::from(px[k]) + 0.45 * red) as u8
                        });
                    }
                    for dy in 0..scale {
                        for dx in 0..scale {
                            canvas.set(left + col * scale + dx, y0 + r * scale + dy, px);
                        }
                    }
                }
            }
            left += slice.cols * scale + GAP;
        }
    }
    // The colour bar, the field's largest value at its top.
    let bar_x = MARGIN + tiles_width + GAP;
    let bar_height = grid_height.saturating_sub(GAP).max(1);
    for y in 0..bar_height {
        let t = 1.0 - y as f64 / (bar_height.max(2) - 1) as f64;
        for x in 0..BAR_WIDTH {
            canvas.set(bar_x + x, top + y, colour(t));
        }
    }
    let label_x = bar_x + BAR_WIDTH + GAP;
    canvas.text(label_x, top, &short(hi), 1);
    canvas.text(label_x, top + bar_height.saturating_sub(8), &short(lo), 1);
    let foot = top + grid_height;
    let axes = match sz {
        1 => "x-y".to_string(),
        _ => format!(
            "x-y at z={}, x-z at y={}, y-z at x={}",
            sz / 2,
            sy / 2,
            sx / 2
        ),
    };
    canvas.text(MARGIN, foot, &axes, 1);
    if shown < channels {
        canvas.text(
            MARGIN,
            foot + 10,
            &format!("channels 0-{} of {channels}", shown - 1),
            1,
        );
    }
    Ok(Picture {
        width: canvas.width as u32,
        height: canvas.height as u32,
        rgb: canvas.rgb,
    })
}

/// A bound of the colour scale in at most 11 characters.
fn short(v: f64) -> String {
    if !v.is_finite() {
        return "nan".into();
    }
    let text = format!("{v:.4}");
    match text.len() <= 11 {
        true => text,
        false => format!("{v:.3e}"),
    }
}

impl Picture {
    /// The picture as a PNG file's bytes.
    pub fn png(&self) -> Result<Vec<u8>, CompactError> {
        let mut out = Vec::new();
        let fail = |e: png::EncodingError| CompactError::Internal(format!("encoding a PNG: {e}"));
        {
            let mut encoder = png::Encoder::new(&mut out, self.width, self.height);
            encoder.set_color(png::ColorType::Rgb);
            encoder.set_depth(png::BitDepth::Eight);
            let mut writer = encoder.write_header().map_err(fail)?;
            writer.write_image_data(&self.rgb).map_err(fail)?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scene(values: &[f64], shape: &[usize]) -> Picture {
        render(&Scene {
            values,
            shape,
            mask: None,
            title: "s0001 label 1 version 3".into(),
        })
        .unwrap()
    }

    #[test]
    fn a_volume_shows_its_middle_slices_of_each_channel_on_one_scale() {
        // 4×4×2 voxels, 2 channels: channel 0 all 0, channel 1 all 9.
        let shape = [4, 4, 2, 2];
        let values: Vec<f64> = (0..64)
            .map(|i| if i % 2 == 0 { 0.0 } else { 9.0 })
            .collect();
        let p = scene(&values, &shape);
        assert_eq!(p.rgb.len(), (p.width * p.height * 3) as usize);
        let scale = TILE / 4;
        let top = MARGIN + 2 * 8 + GAP;
        let pixel = |x: usize, y: usize| {
            let at = 3 * (y * p.width as usize + x);
            [p.rgb[at], p.rgb[at + 1], p.rgb[at + 2]]
        };
        // Channel 0's first slice: the scale's low end; channel 1's, its high end.
        assert_eq!(pixel(MARGIN, top), colour(0.0));
        assert_eq!(pixel(MARGIN, top + 4 * scale + GAP), colour(1.0));
        // Three slices a row: the third starts after two tiles and their gaps.
        let third = MARGIN + (4 + 2) * scale + 2 * GAP;
        assert_eq!(pixel(third, top), colour(0.0));
        // The title's ink.
        assert!((0..p.width as usize).any(|x| pixel(x, MARGIN + 4) == INK));
    }

    #[test]
    fn a_mask_is_overlaid_and_nans_are_grey() {
        let shape = [2, 2, 1];
        let values = [0.0, 1.0, f64::NAN, 2.0];
        let mask = [0.0, 0.0, 0.0, 1.0];
        let p = render(&Scene {
            values: &values,
            shape: &shape,
            mask: Some(&mask),
            title: "m".into(),
        })
        .unwrap();
        let scale = TILE / 2;
        let top = MARGIN + 2 * 8 + GAP;
        let pixel = |x: usize, y: usize| {
            let at = 3 * (y * p.width as usize + x);
            [p.rgb[at], p.rgb[at + 1], p.rgb[at + 2]]
        };
        assert_eq!(pixel(MARGIN, top + scale), NAN);
        let masked = pixel(MARGIN + scale, top + scale);
        assert!(masked[0] > masked[1] && masked[0] > masked[2], "{masked:?}");
    }

    #[test]
    fn the_png_decodes_to_the_same_pixels() {
        let values: Vec<f64> = (0..30 * 30 * 10).map(f64::from).collect();
        let p = scene(&values, &[30, 30, 10]);
        let bytes = p.png().unwrap();
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (p.width, p.height));
        assert_eq!(&buf[..info.buffer_size()], &p.rgb[..]);
    }

    #[test]
    fn a_field_of_one_axis_is_refused() {
        let e = render(&Scene {
            values: &[1.0, 2.0],
            shape: &[2],
            mask: None,
            title: String::new(),
        })
        .unwrap_err();
        assert!(e.contains("two axes"), "{e}");
    }
}
