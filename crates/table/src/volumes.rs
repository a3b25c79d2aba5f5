//! A bricked table's volumes at a version ([`Scan::volumes`]): each volume's info (shape,
//! spacing, class voxels), checked against the layout and against the bricks the scan holds,
//! from three small columns (id, label, the info; no brick is read). Volumes sorted by id: a
//! volume's number is the same on every rank and every run of the version.

use std::collections::HashMap;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use voxlake_format::volume::{BrickSpec, VOLUME_INFO_FIELD, VolumeInfo};
use voxlake_format::{ID_COLUMN, LABEL_COLUMN};

use crate::error::TableError;
use crate::scan::Scan;

/// A bricked table's volumes (see the module docs).
#[derive(Debug, Clone)]
pub struct Volumes {
    spec: BrickSpec,
    volumes: Vec<Volume>,
    by_id: HashMap<String, usize>,
    unfinished: Vec<String>,
}

/// One volume of a bricked table.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Volume {
    /// Its id (its bricks' ids are `id#n`).
    pub id: String,
    /// Its label.
    pub label: Option<i64>,
    /// Its info: shape, spacing, class voxels.
    pub info: VolumeInfo,
}

impl Volumes {
    /// The table's layout.
    pub fn spec(&self) -> &BrickSpec {
        &self.spec
    }

    /// The volumes, by id.
    pub fn volumes(&self) -> &[Volume] {
        &self.volumes
    }

    /// The number of volume `id`.
    pub fn find(&self, id: &str) -> Option<usize> {
        self.by_id.get(id).copied()
    }

    /// Volumes whose bricks are there but not their info (a writer stopped before their last
    /// brick): left out.
    pub fn unfinished(&self) -> &[String] {
        &self.unfinished
    }
}

/// What the rows say of one volume as they are read.
#[derive(Default)]
struct Seen {
    bricks: u64,
    last: u64,
    label: Option<i64>,
    info: Option<(u64, String)>,
}

impl Scan {
    /// The volumes of this scan of a bricked table (see the module docs). A table that is not
    /// bricked, an id that is not `VOLUME#N`, two infos of a volume, an info that does not
    /// check (`VolumeInfo::from_json`) or a volume whose bricks are not those its info says
    /// is an error naming the volume; a volume without its info (a writer that stopped
    /// mid-volume) is left out, and said in a warning.
    pub async fn volumes(&self) -> Result<Volumes, TableError> {
        let snapshot = self.snapshot();
        let refused = |reason: String| TableError::Incompatible {
            location: snapshot.location().to_string(),
            reason,
        };
        let Some(spec) = snapshot.bricks().cloned() else {
            return Err(refused(format!(
                "version {} is not a table of bricked volumes (no '{}' in its configuration)",
                snapshot.version(),
                voxlake_format::volume::BRICKS_KEY
            )));
        };
        let values = self
            .column_values(&[ID_COLUMN, LABEL_COLUMN, VOLUME_INFO_FIELD])
            .await?;
        let mut seen: HashMap<String, Seen> = HashMap::new();
        for ((ids, labels), infos) in values[0].iter().zip(&values[1]).zip(&values[2]) {
            see(&mut seen, ids, labels, infos).map_err(&refused)?;
        }
        let mut volumes = Vec::with_capacity(seen.len());
        let mut unfinished = Vec::new();
        for (id, s) in seen {
            let Some((number, text)) = s.info else {
                unfinished.push(id);
                continue;
            };
            let info = VolumeInfo::from_json(&text, &spec)
                .map_err(|e| refused(format!("volume '{id}': {e}")))?;
            let bricks = info.bricks(&spec);
            if (s.bricks, s.last, number) != (bricks, bricks - 1, bricks - 1) {
                return Err(refused(format!(
                    "volume '{id}' of {:?} voxels takes {bricks} bricks of {:?}; the scan holds {} (the last numbered {}, the info in {number})",
                    info.shape,
                    spec.brick(),
                    s.bricks,
                    s.last
                )));
            }
            volumes.push(Volume {
                id,
                label: s.label,
                info,
            });
        }
        volumes.sort_by(|a, b| a.id.cmp(&b.id));
        unfinished.sort();
        if !unfinished.is_empty() {
            tracing::warn!(
                table = snapshot.location(),
                version = snapshot.version(),
                count = unfinished.len(),
                first = ?&unfinished[..unfinished.len().min(5)],
                "volumes without their info (a writer stopped mid-volume) are left out"
            );
        }
        let by_id = volumes
            .iter()
            .enumerate()
            .map(|(i, v)| (v.id.clone(), i))
            .collect();
        Ok(Volumes {
            spec,
            volumes,
            by_id,
            unfinished,
        })
    }
}

/// Adds one file's rows to `seen`.
fn see(
    seen: &mut HashMap<String, Seen>,
    ids: &ArrayRef,
    labels: &ArrayRef,
    infos: &ArrayRef,
) -> Result<(), String> {
    let ids = text(ids, ID_COLUMN)?;
    let infos = text(infos, VOLUME_INFO_FIELD)?;
    let labels = arrow_cast::cast(labels, &DataType::Int64).map_err(|e| e.to_string())?;
    let labels = labels.as_primitive::<arrow_array::types::Int64Type>();
    for row in 0..ids.len() {
        let id = ids.value(row);
        let Some((volume, number)) = id
            .rsplit_once('#')
            .and_then(|(v, n)| Some((v, n.parse::<u32>().ok()?)))
        else {
            return Err(format!(
                "row '{id}' of a bricked table: its id is not VOLUME#N"
            ));
        };
        let s = seen.entry(volume.to_string()).or_default();
        s.bricks += 1;
        s.last = s.last.max(u64::from(number));
        s.label = labels.is_valid(row).then(|| labels.value(row));
        let info = infos.value(row);
        if info.is_empty() {
            continue;
        }
        if let Some((other, _)) = &s.info {
            return Err(format!(
                "volume '{volume}' has two infos, in bricks {other} and {number}"
            ));
        }
        s.info = Some((u64::from(number), info.to_string()));
    }
    Ok(())
}

/// A column of text as UTF-8 strings.
fn text(array: &ArrayRef, column: &str) -> Result<arrow_array::StringArray, String> {
    let cast =
        arrow_cast::cast(array, &DataType::Utf8).map_err(|e| format!("column '{column}': {e}"))?;
    if cast.null_count() > 0 {
        return Err(format!("column '{column}' has a null"));
    }
    Ok(cast.as_string::<i32>().clone())
}
