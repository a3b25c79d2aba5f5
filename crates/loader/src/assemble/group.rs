//! A decoded row group as the shuffle buffer holds it: its columns checked once against the
//! loader's sample (each tensor of the right size, each text column text), typed views kept
//! for the rows the mixer will draw, and its straggling rows copied out (`loosen`).

use super::*;

/// A field's column in a decoded row group.
pub(super) enum Column {
    /// A tensor field: each row's little-endian bytes.
    Tensors(BinaryViewArray),
    /// A text field.
    Text(StringArray),
}

/// A decoded row group and typed views of its columns.
pub(crate) struct Group {
    pub data: RowGroupBatch,
    pub(super) file: Arc<str>,
    /// Its source (0 but in a mixture).
    pub(super) source: u32,
    pub(super) ids: Option<StringArray>,
    pub(super) labels: Option<Int64Array>,
    /// Per field of the table's sample, its column (`None` where it is not read).
    pub(super) fields: Vec<Option<Column>>,
}

impl Group {
    /// The index in `data` of the unit's `kept`-th kept row.
    pub(crate) fn index_of(&self, kept: u64) -> Option<usize> {
        self.data.index_of_row(self.data.unit.drawn_row(kept)?)
    }

    pub(super) fn id(&self, index: usize) -> String {
        self.ids
            .as_ref()
            .map_or_else(String::new, |ids| ids.value(index).to_string())
    }

    pub(super) fn label(&self, index: usize) -> Option<i64> {
        self.labels
            .as_ref()
            .and_then(|l| (!l.is_null(index)).then(|| l.value(index)))
    }

    /// Field `field`'s bytes in row `index` (empty where not read or not a tensor).
    pub(crate) fn bytes(&self, field: usize, index: usize) -> &[u8] {
        match self.fields.get(field) {
            Some(Some(Column::Tensors(t))) => t.value(index),
            _ => &[],
        }
    }

    /// Field `field`'s string in row `index` (empty where null or not read).
    pub(super) fn text(&self, field: usize, index: usize) -> String {
        match self.fields.get(field) {
            Some(Some(Column::Text(t))) if !t.is_null(index) => t.value(index).to_string(),
            _ => String::new(),
        }
    }
}

impl Assembler {
    pub(crate) fn group(&self, data: RowGroupBatch) -> Result<Group, LoaderError> {
        let column = |name: &str| data.batch.column_by_name(name).cloned();
        let ids = column(ID_COLUMN).and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned());
        let labels =
            column(LABEL_COLUMN).and_then(|c| c.as_any().downcast_ref::<Int64Array>().cloned());
        let (source, scan, file) = self.sources.locate(data.file());
        let file: Arc<str> = scan.files().at(file).path().into();
        let snapshot = scan.snapshot();
        let mut fields = Vec::with_capacity(self.input_spec.fields().len());
        for field in self.input_spec.fields() {
            let read = column(&field.name);
            let bad = |i: usize, found: usize, expected: usize| LoaderError::BadRow {
                location: snapshot.location().to_string(),
                file: file.to_string(),
                id: ids
                    .as_ref()
                    .map_or_else(|| format!("#{i}"), |ids| ids.value(i).to_string()),
                field: field.name.as_str().into(),
                found,
                expected,
                spec: field.kind.to_string().into(),
            };
            fields.push(match (&field.kind, read) {
                (_, None) => None,
                (FieldKind::Tensor(spec), Some(c)) => {
                    let Some(tensors) = c.as_any().downcast_ref::<BinaryViewArray>().cloned()
                    else {
                        return Err(bad(0, 0, spec.nbytes()));
                    };
                    let expected = spec.nbytes();
                    for i in 0..tensors.len() {
                        let found = tensors.value(i).len();
                        if found != expected || tensors.is_null(i) {
                            return Err(bad(i, found, expected));
                        }
                    }
                    Some(Column::Tensors(tensors))
                }
                (FieldKind::Text, Some(c)) => match c.as_any().downcast_ref::<StringArray>() {
                    Some(text) => Some(Column::Text(text.clone())),
                    None => return Err(bad(0, 0, 0)),
                },
                #[allow(unreachable_patterns)]
                (_, Some(_)) => None,
            });
        }
        Ok(Group {
            file,
            source: source as u32,
            ids,
            labels,
            fields,
            data,
        })
    }

    /// Keeps only the rows `kept` (the unit's kept-row numbers the mixer still has to draw)
    /// of a buffered group, copied out so the rest of its row group and budget are freed.
    pub(crate) fn loosen(
        &self,
        group: Arc<Group>,
        kept: &[u64],
    ) -> Result<Arc<Group>, LoaderError> {
        let mut indices = kept
            .iter()
            .map(|&k| group.index_of(k).map(|i| i as u64))
            .collect::<Option<Vec<u64>>>()
            .ok_or_else(|| {
                LoaderError::Internal(format!(
                    "a row to keep is not in the buffered group of {}",
                    group.file
                ))
            })?;
        // A row drawn twice (weighted draws) is two kept rows of one row: copied once.
        indices.dedup();
        let data = match Arc::try_unwrap(group) {
            Ok(group) => group.data,
            Err(shared) => shared.data.clone(),
        };
        let loose = self.group(data.take(&indices)?)?;
        self.counters
            .loosened_rows
            .fetch_add(kept.len() as u64, Ordering::Relaxed);
        Ok(Arc::new(loose))
    }
}

/// A batch's row groups as a trace names them (`file#row_group`, each once), which ties the
/// batch's `assemble` span to the `row_group` spans that read them.
pub(crate) struct RowGroups<'a>(pub &'a [super::Row]);

impl std::fmt::Display for RowGroups<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut seen = std::collections::BTreeSet::new();
        for row in self.0 {
            let unit = &row.group.data.unit;
            if seen.insert((row.group.file.clone(), unit.row_group)) {
                if seen.len() > 1 {
                    f.write_str(" ")?;
                }
                write!(f, "{}#{}", row.group.file, unit.row_group)?;
            }
        }
        Ok(())
    }
}
