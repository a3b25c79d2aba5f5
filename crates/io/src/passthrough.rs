//! The pass-through half of the wrapper stores: `ObjectStore` written once for every store
//! that changes a few calls (this crate's `MappedLocalStore`, `RemoteStore`, `RetryBroken`;
//! voxlake-delta's `LogCache` and `LogMemo`), as object_store writes each of its own wrappers
//! (`LimitStore`, `ThrottledStore`) around the calls it changes.

/// Implements `Display` and `ObjectStore` for `$store`, whose field `inner` is the store it
/// wraps: the methods given in the braces are the store's own, and every write (put, multipart
/// upload, delete, copy, rename) goes to `inner` unchanged. The reads (`get_opts`, the
/// listings) must be among the given ones. The crate that uses it depends on `object_store` and
/// `futures`.
#[macro_export]
macro_rules! wrapper_store {
    ($store:ident, { $($own:tt)* }) => {
        impl ::std::fmt::Display for $store {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                write!(f, "{}({})", stringify!($store), self.inner)
            }
        }

        #[$crate::__private::async_trait]
        impl ::object_store::ObjectStore for $store {
            $($own)*

            async fn put_opts(
                &self,
                location: &::object_store::path::Path,
                payload: ::object_store::PutPayload,
                opts: ::object_store::PutOptions,
            ) -> ::object_store::Result<::object_store::PutResult> {
                self.inner.put_opts(location, payload, opts).await
            }

            async fn put_multipart_opts(
                &self,
                location: &::object_store::path::Path,
                opts: ::object_store::PutMultipartOptions,
            ) -> ::object_store::Result<Box<dyn ::object_store::MultipartUpload>> {
                self.inner.put_multipart_opts(location, opts).await
            }

            fn delete_stream(
                &self,
                locations: ::futures::stream::BoxStream<
                    'static,
                    ::object_store::Result<::object_store::path::Path>,
                >,
            ) -> ::futures::stream::BoxStream<
                'static,
                ::object_store::Result<::object_store::path::Path>,
            > {
                self.inner.delete_stream(locations)
            }

            async fn copy_opts(
                &self,
                from: &::object_store::path::Path,
                to: &::object_store::path::Path,
                options: ::object_store::CopyOptions,
            ) -> ::object_store::Result<()> {
                self.inner.copy_opts(from, to, options).await
            }

            async fn rename_opts(
                &self,
                from: &::object_store::path::Path,
                to: &::object_store::path::Path,
                options: ::object_store::RenameOptions,
            ) -> ::object_store::Result<()> {
                self.inner.rename_opts(from, to, options).await
            }
        }
    };
}

/// `wrapper_store!` for a store whose `get_ranges` is its own `read_ranges` (every data read
/// of a table goes through it); `get_opts` and the listings go to `inner` unchanged.
macro_rules! reads_ranges_itself {
    ($store:ident) => {
        $crate::wrapper_store!($store, {
            async fn get_ranges(
                &self,
                location: &::object_store::path::Path,
                ranges: &[::std::ops::Range<u64>],
            ) -> ::object_store::Result<Vec<::bytes::Bytes>> {
                self.read_ranges(location, ranges).await
            }

            async fn get_opts(
                &self,
                location: &::object_store::path::Path,
                options: ::object_store::GetOptions,
            ) -> ::object_store::Result<::object_store::GetResult> {
                self.inner.get_opts(location, options).await
            }

            fn list(
                &self,
                prefix: Option<&::object_store::path::Path>,
            ) -> ::futures::stream::BoxStream<
                'static,
                ::object_store::Result<::object_store::ObjectMeta>,
            > {
                self.inner.list(prefix)
            }

            fn list_with_offset(
                &self,
                prefix: Option<&::object_store::path::Path>,
                offset: &::object_store::path::Path,
            ) -> ::futures::stream::BoxStream<
                'static,
                ::object_store::Result<::object_store::ObjectMeta>,
            > {
                self.inner.list_with_offset(prefix, offset)
            }

            async fn list_with_delimiter(
                &self,
                prefix: Option<&::object_store::path::Path>,
            ) -> ::object_store::Result<::object_store::ListResult> {
                self.inner.list_with_delimiter(prefix).await
            }
        });
    };
}

pub(crate) use reads_ranges_itself;
