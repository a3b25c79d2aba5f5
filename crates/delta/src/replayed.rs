//! A Delta version's files and table description as the log gives them ([`Replayed`]), made
//! by either reader of the log (`read`) and kept whole by the node's cache (`file_list::cache`),
//! so a rank that finds it there never reads the log.

use deltalake::kernel::{DeletionVectorDescriptor, Metadata, Protocol as DeltaProtocol};

use crate::file_list::{FileList, FileListBuilder};

/// What a Delta version is, as its log says.
pub(crate) struct Replayed {
    pub version: u64,
    pub protocol: DeltaProtocol,
    pub metadata: Metadata,
    /// The active files (their statistics where asked for), deletion vectors not yet read.
    pub files: FileList,
    /// The files with a deletion vector (their index in `files`) and its descriptor.
    pub vectors: Vec<(usize, DeletionVectorDescriptor)>,
}

/// The files pushed, sorted, and the deletion vectors (pushed at the index of their file) at
/// their file's sorted index. The log's order is not stable across checkpoints: sorted so plans
/// are reproducible, by write time first so that "table order" is the order the rows were
/// written in.
pub(crate) fn finish(
    builder: FileListBuilder,
    vectors: Vec<(usize, DeletionVectorDescriptor)>,
) -> (FileList, Vec<(usize, DeletionVectorDescriptor)>) {
    let pushed: Vec<usize> = vectors.iter().map(|(i, _)| *i).collect();
    let (files, places) = builder.finish(&pushed);
    let vectors = vectors
        .into_iter()
        .zip(places)
        .map(|((_, descriptor), index)| (index, descriptor))
        .collect();
    (files, vectors)
}
