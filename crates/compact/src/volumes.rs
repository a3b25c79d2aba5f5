//! Volumes larger than a sample written as bricks ([`Compactor::volume_writer`]): each
//! volume cut on one grid for all its fields, a row a brick, the volume's info (shape,
//! spacing, class voxels) in its last brick's row, so a volume whose info a reader sees has
//! all its bricks committed (rows are committed in the order pushed). The layout is
//! docs/format.md's "Bricked volumes".

use std::time::Instant;

use bytes::Bytes;
use voxlake_format::volume::{
    BrickSpec, DEFAULT_CLASS_COORDS, MAX_CLASS_COORDS, MAX_INFO_BYTES, VolumeInfo, brick_id,
};
use voxlake_plan::patch::BrickGrid;

use crate::sink::ConvertSummary;
use crate::writer::RowWriter;
use crate::{CompactError, Compactor};

mod bricks;
mod classes;
mod convert;

/// One volume to write: its id, label, spatial shape, spacing, and each field's values
/// (little-endian, C order, channels first where the field has them) in the layout's order.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Volume {
    /// The volume's id (its bricks' ids are `id#n`).
    pub id: String,
    /// Its label (every brick's), if any.
    pub label: Option<i64>,
    /// Voxels along z, y, x.
    pub shape: [u64; 3],
    /// The voxels' spacing along z, y, x, if known.
    pub spacing: Option<[f64; 3]>,
    /// Each field's bytes.
    pub fields: Vec<Bytes>,
}

impl Volume {
    /// Volume `id` of `shape` voxels holding `fields`.
    pub fn new(id: impl Into<String>, shape: [u64; 3], fields: Vec<Bytes>) -> Volume {
        Volume {
            id: id.into(),
            label: None,
            shape,
            spacing: None,
            fields,
        }
    }

    /// With a label.
    pub fn with_label(self, label: Option<i64>) -> Volume {
        Volume { label, ..self }
    }

    /// With the voxels' spacing.
    pub fn with_spacing(self, spacing: Option<[f64; 3]>) -> Volume {
        Volume { spacing, ..self }
    }
}

/// Volumes written into a bricked table one at a time; see [`Compactor::volume_writer`].
#[derive(Debug)]
pub struct VolumeWriter<'a> {
    rows: RowWriter<'a>,
    spec: BrickSpec,
    class_coords: usize,
    volumes: u64,
}

impl Compactor {
    /// A writer of volumes laid out as `spec` into this compactor's table, created where
    /// missing (an existing table must hold the same layout). [`VolumeWriter::push`] takes a
    /// volume; [`VolumeWriter::finish`] commits the last. A volume whose bricks the table
    /// holds is skipped (a re-run adds what is missing, finishing a volume half written);
    /// `--shard`s split volumes, not bricks.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use voxlake_compact::{Compactor, Volume};
    /// use voxlake_format::DType;
    /// use voxlake_format::volume::{BrickSpec, VolumeField};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let table = dir.path().join("table").to_string_lossy().into_owned();
    /// let spec = BrickSpec::new(
    ///     [4, 4, 4],
    ///     vec![VolumeField::new("image", DType::F32), VolumeField::new("mask", DType::U8)],
    /// )?;
    /// let compactor = Compactor::new(&table);
    /// let mut writer = compactor.volume_writer(spec).await?;
    /// // A 10×6×5 volume: 3×2×2 bricks.
    /// let image: Vec<u8> = (0..300).flat_map(|v| (v as f32).to_le_bytes()).collect();
    /// let mask: Vec<u8> = (0..300).map(|v| u8::from(v % 7 == 0)).collect();
    /// let volume = Volume::new("ct_1", [10, 6, 5], vec![image.into(), mask.into()]);
    /// assert!(writer.push(volume).await?);
    /// assert_eq!(writer.finish().await?.rows, 12);
    /// # Ok(()) }
    /// ```
    pub async fn volume_writer(&self, spec: BrickSpec) -> Result<VolumeWriter<'_>, CompactError> {
        self.no_labels_file()?;
        self.open_volume_writer(spec).await
    }

    /// [`volume_writer`](Self::volume_writer) for a conversion (its labels file read by it).
    pub(crate) async fn open_volume_writer(
        &self,
        spec: BrickSpec,
    ) -> Result<VolumeWriter<'_>, CompactError> {
        let sample = spec.sample().map_err(|e| CompactError::Incompatible {
            location: voxlake_io::redact(&self.table),
            reason: e.to_string(),
        })?;
        let rows = self.writer_of(sample, Some(&spec)).await?;
        Ok(VolumeWriter {
            rows,
            spec,
            class_coords: DEFAULT_CLASS_COORDS,
            volumes: 0,
        })
    }
}

impl VolumeWriter<'_> {
    /// Keeps at most `n` voxel coordinates a class and volume (default
    /// [`DEFAULT_CLASS_COORDS`], at most [`MAX_CLASS_COORDS`]).
    pub fn with_class_coords(self, n: usize) -> Result<Self, CompactError> {
        if n > MAX_CLASS_COORDS {
            return Err(self.rows.refused(format!(
                "{n} coordinates a class: at most {MAX_CLASS_COORDS}"
            )));
        }
        Ok(VolumeWriter {
            class_coords: n,
            ..self
        })
    }

    /// Adds `volume`'s bricks (its info in the last); `false` where the table held it already
    /// or it is another shard's: skipped. A field of the wrong size, a label field that is
    /// not a label map, or a volume id pushed twice is an error naming the volume: nothing of
    /// the open window is committed once one is returned.
    pub async fn push(&mut self, volume: Volume) -> Result<bool, CompactError> {
        let grid = BrickGrid::new(volume.shape, self.spec.brick())
            .map_err(|e| self.refused(&volume.id, e.to_string()))?;
        let last = brick_id(&volume.id, grid.len().saturating_sub(1));
        if !self.rows.compactor().in_shard(&volume.id) {
            return Ok(false);
        }
        if self.rows.holds(&last) {
            self.rows.skipped_present(grid.len());
            return Ok(false);
        }
        // Sizes checked before the classes are counted over the values.
        let fields = self.fields(&volume)?;
        let info = self.info(&volume, &grid)?;
        let counts = grid.counts();
        let mut number = 0u64;
        for z in 0..counts[0] {
            for y in 0..counts[1] {
                for x in 0..counts[2] {
                    let mut row: Vec<Bytes> = fields
                        .iter()
                        .map(|f| bricks::cut(*f, &grid, self.spec.brick(), [z, y, x]).into())
                        .collect();
                    row.push(Bytes::from(volume.id.clone()));
                    let last = number + 1 == grid.len();
                    row.push(match last {
                        true => Bytes::from(info.clone()),
                        false => Bytes::new(),
                    });
                    let id = brick_id(&volume.id, number);
                    self.rows.push_unsharded(&id, volume.label, row).await?;
                    number += 1;
                }
            }
        }
        self.volumes += 1;
        Ok(true)
    }

    /// Writes and commits the bricks left; the run's summary (its rows are bricks).
    pub async fn finish(self) -> Result<ConvertSummary, CompactError> {
        tracing::info!(volumes = self.volumes, "volumes written");
        self.rows.finish().await
    }

    /// Each field's bytes, checked against the layout and the volume's shape.
    fn fields<'v>(&self, volume: &'v Volume) -> Result<Vec<bricks::Field<'v>>, CompactError> {
        let layout = self.spec.fields();
        if volume.fields.len() != layout.len() {
            return Err(self.refused(
                &volume.id,
                format!(
                    "{} fields, the table's volumes have {}",
                    volume.fields.len(),
                    layout.len()
                ),
            ));
        }
        let mut fields = Vec::with_capacity(layout.len());
        for (bytes, field) in volume.fields.iter().zip(layout) {
            let item = field.dtype.size() as u64;
            let shape = field.shape(volume.shape);
            let want = shape
                .iter()
                .try_fold(item, |n, &d| n.checked_mul(d))
                .filter(|&n| n <= isize::MAX as u64);
            if want != Some(bytes.len() as u64) {
                return Err(self.refused(
                    &volume.id,
                    format!(
                        "field '{}' has {} bytes, {} {shape:?} takes {}",
                        field.name,
                        bytes.len(),
                        field.dtype,
                        want.map_or("too many".into(), |n| n.to_string())
                    ),
                ));
            }
            fields.push(bricks::Field {
                bytes,
                channels: field.channels.unwrap_or(1),
                item,
            });
        }
        Ok(fields)
    }

    /// The volume's info as stored: its shape, spacing and class fields' classes.
    fn info(&self, volume: &Volume, grid: &BrickGrid) -> Result<String, CompactError> {
        if grid.len() > u64::from(u32::MAX) {
            return Err(self.refused(&volume.id, format!("{} bricks: at most 2^32", grid.len())));
        }
        let mut info = VolumeInfo::new(volume.shape);
        info.spacing = volume.spacing;
        let seed = voxlake_io::location::stable_hash(&volume.id);
        for name in self.spec.class_fields() {
            let Some(i) = self.spec.fields().iter().position(|f| &f.name == name) else {
                continue;
            };
            let field = &self.spec.fields()[i];
            let Some(bytes) = volume.fields.get(i) else {
                continue; // never: `fields` checked the count
            };
            let start = Instant::now();
            let found = classes::classes(bytes, field.dtype, volume.shape, self.class_coords, seed)
                .map_err(|e| self.refused(&volume.id, format!("class field '{name}': {e}")))?;
            tracing::debug!(
                volume = volume.id.as_str(),
                field = name.as_str(),
                classes = found.len(),
                seconds = start.elapsed().as_secs_f64(),
                "classes counted"
            );
            info.classes.insert(name.clone(), found);
        }
        let text = info
            .to_json()
            .map_err(|e| self.refused(&volume.id, e.to_string()))?;
        if text.len() > MAX_INFO_BYTES {
            return Err(self.refused(
                &volume.id,
                format!(
                    "its info takes {} bytes, more than {MAX_INFO_BYTES}",
                    text.len()
                ),
            ));
        }
        Ok(text)
    }

    fn refused(&self, volume: &str, reason: String) -> CompactError {
        self.rows.refused(format!("volume '{volume}': {reason}"))
    }
}
