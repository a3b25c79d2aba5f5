//! Patches of a bricked table's volumes by their place ([`Lookup::patches`]): only the bricks
//! the patches overlap are read, each once, through the lookup's reads (the memory budget, the
//! node cache, the checksums).

use std::sync::Arc;
use std::time::Instant;

use voxlake_plan::patch::{Dims, Pad};
use voxlake_table::{TableError, Volumes};

use super::Lookup;
use crate::patches::Needs;
use crate::{Batch, LoaderError};

impl Lookup {
    /// The volumes of a bricked table's version (`voxlake_table::Scan::volumes`), read at the
    /// first call: the id, label and info columns, no brick.
    pub fn volumes(&self) -> Result<Arc<Volumes>, LoaderError> {
        let mut volumes = self
            .volumes
            .lock()
            .map_err(|_| LoaderError::Internal("the volumes' lock".into()))?;
        if let Some(read) = volumes.as_ref() {
            return Ok(read.clone());
        }
        let scan = self.stream.scan().clone();
        let read = Arc::new(self.on_runtime(async move {
            scan.volumes()
                .await
                .map_err(|e| LoaderError::Stream(e.into()))
        })?);
        *volumes = Some(read.clone());
        Ok(read)
    }

    /// Patches of `size` voxels (z, y, x) at `at`: each a volume's number in
    /// [`volumes`](Self::volumes) and the origin of the patch in it (below 0 or past the edge
    /// where it is padded: zeros with [`Pad::Zero`], the edge's voxels with [`Pad::Edge`]; with
    /// [`Pad::None`] a patch must lie inside). One batch: each volume field the lookup reads
    /// as `[B, C?, pz, py, px]`, `origin` (int64 `[B, 3]`), the volumes' ids and labels. Only
    /// the bricks the patches overlap are read, each once.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let table = dir.path().join("t").to_string_lossy().into_owned();
    /// # use voxlake_format::{DType, volume::{BrickSpec, VolumeField}};
    /// # let spec = BrickSpec::new([4, 4, 4], vec![VolumeField::new("image", DType::U8)])?;
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// #     let compactor = voxlake_compact::Compactor::new(&table);
    /// #     let mut writer = compactor.volume_writer(spec).await?;
    /// #     let voxels: Vec<u8> = (0..=255).cycle().take(10 * 9 * 8).collect();
    /// #     writer.push(voxlake_compact::Volume::new("ct", [10, 9, 8], vec![voxels.into()])).await?;
    /// #     writer.finish().await.map(drop)
    /// # })?;
    /// use voxlake_loader::Loader;
    /// use voxlake_plan::patch::Pad;
    ///
    /// let rows = Loader::builder(&table).build_lookup()?;
    /// let ct = rows.volumes()?.find("ct").unwrap();
    /// let batch = rows.patches([6, 6, 6], Pad::Zero, &[(ct, [0, 0, 0]), (ct, [7, 7, 7])])?;
    /// assert_eq!(batch.tensors.shape(), [2, 6, 6, 6]);
    /// assert_eq!(batch.ids, ["ct", "ct"]);
    /// # Ok(()) }
    /// ```
    pub fn patches(
        &self,
        size: Dims,
        pad: Pad,
        at: &[(usize, [i64; 3])],
    ) -> Result<Batch, LoaderError> {
        if at.is_empty() {
            return Err(LoaderError::Config("a lookup of no patches".into()));
        }
        let volumes = self.volumes()?;
        let needs = Needs::of(&volumes, size, pad, at)?;
        let index = self.ids()?;
        let scan = self.stream.scan();
        let positions = needs
            .ids
            .iter()
            .map(|id| {
                index.position(id).ok_or_else(|| {
                    LoaderError::Stream(
                        TableError::NoId {
                            location: scan.snapshot().location().to_string(),
                            id: id.clone(),
                            version: scan.snapshot().version(),
                        }
                        .into(),
                    )
                })
            })
            .collect::<Result<Vec<u64>, LoaderError>>()?;
        let rows = self.on_runtime(self.read_rows(&positions))?;
        let start = Instant::now();
        // The stream leaves the rows' checksums to the loader: each brick once.
        self.assembler.check_rows(&rows)?;
        let read = &self.assembler.input_spec;
        let fields: Vec<Option<usize>> = volumes
            .spec()
            .fields()
            .iter()
            .map(|f| read.fields().iter().position(|r| r.name == f.name))
            .collect();
        let batch = needs.assemble(&volumes, &rows, &fields)?;
        self.count(&batch, start);
        Ok(batch)
    }
}
