//! Data kept on the grid between calls and transactions (the GridRPC data-management API;
//! docs/data.md): [`AsyncGridClient::put`] sends an array once and returns a [`DataRef`],
//! which goes in calls and transactions wherever an array does ([`super::TxArg::Data`]); the
//! array stays on a compute server until [`AsyncGridClient::free`] or until its lease runs
//! out. The client renews its handles' leases in the background while it lives.

use bytes::Bytes;
use ninf_idl::ElementType;
use ninf_proto::v1;

use super::async_client::AsyncGridClient;
use super::data_ref::{DataInfo, DataMode, DataRef, Shape, put_spec, spec};
use crate::{ArrayRef, CallError, ErrorKind};

impl AsyncGridClient {
    /// Sends `array` (of `shape`, or one dimension when empty) once and keeps it on the grid.
    pub async fn put(
        &self,
        array: ArrayRef<'_>,
        shape: &[u64],
        mode: DataMode,
    ) -> Result<DataRef, CallError> {
        self.put_replicated(array, shape, mode, 1).await
    }

    /// [`AsyncGridClient::put`] in `replicas` copies (persistent data only), each on a server
    /// of its own.
    pub async fn put_replicated(
        &self,
        array: ArrayRef<'_>,
        shape: &[u64],
        mode: DataMode,
        replicas: u32,
    ) -> Result<DataRef, CallError> {
        let shape = Shape {
            dims: shape,
            fortran_order: false,
        };
        let bytes = array.le_bytes();
        self.put_slice_replicated(array.element_type(), shape, &bytes, mode, replicas)
            .await
    }

    /// [`AsyncGridClient::put`] of an array given as its little-endian bytes.
    pub async fn put_bytes(
        &self,
        element_type: ElementType,
        shape: Shape<'_>,
        data: Bytes,
        mode: DataMode,
    ) -> Result<DataRef, CallError> {
        self.put_bytes_replicated(element_type, shape, data, mode, 1)
            .await
    }

    /// [`AsyncGridClient::put_bytes`] of persistent data kept in `replicas` copies, each on
    /// a server of its own, so that losing a server loses no data that is only read.
    pub async fn put_bytes_replicated(
        &self,
        element_type: ElementType,
        shape: Shape<'_>,
        data: Bytes,
        mode: DataMode,
        replicas: u32,
    ) -> Result<DataRef, CallError> {
        let spec = put_spec(element_type, shape, data.len() as u64, (mode, replicas))?;
        self.upload(spec, &data, || data.clone()).await
    }

    /// [`AsyncGridClient::put_bytes_replicated`] of bytes the caller keeps: read while the
    /// put lasts, and copied only when they cannot go through memory shared with a proxy on
    /// this host (docs/data.md).
    pub async fn put_slice_replicated(
        &self,
        element_type: ElementType,
        shape: Shape<'_>,
        data: &[u8],
        mode: DataMode,
        replicas: u32,
    ) -> Result<DataRef, CallError> {
        let spec = put_spec(element_type, shape, data.len() as u64, (mode, replicas))?;
        self.upload(spec, data, || Bytes::copy_from_slice(data))
            .await
    }

    /// A handle of `shape` that receives a call's output on the grid.
    pub async fn empty(
        &self,
        element_type: ElementType,
        shape: Shape<'_>,
        mode: DataMode,
    ) -> Result<DataRef, CallError> {
        let size = element_type.size_bytes().unwrap_or(0);
        let bytes = shape.dims.iter().product::<u64>() * size;
        let spec = spec(element_type, shape, bytes, mode, true)?;
        self.upload(spec, &[], Bytes::new).await
    }

    /// Puts `data`, through memory shared with the proxy when it can, else as the bytes
    /// `owned` gives.
    async fn upload(
        &self,
        mut spec: v1::DataSpec,
        data: &[u8],
        owned: impl FnOnce() -> Bytes,
    ) -> Result<DataRef, CallError> {
        // Named, so that sending it again after a try that broke midway makes no second handle.
        spec.put_id = ninf_proto::net::local::random_name("")
            .map_err(|e| CallError::bad_argument(format!("no random name for the put: {e}")))?;
        if let Some(info) = self.upload_shared(&spec, data).await? {
            return self.uploaded(info);
        }
        let data = owned();
        let first = v1::DataUpload {
            spec: Some(spec),
            data: Bytes::new(),
            shared: None,
        };
        let rest = ninf_proto::chunks::stream_chunks(&data)
            .filter(|(_, chunk)| !chunk.is_empty())
            .map(|(_, data)| v1::DataUpload {
                spec: None,
                data,
                shared: None,
            });
        let chunks: Vec<v1::DataUpload> = std::iter::once(first).chain(rest).collect();
        // Chunks hold `Bytes`: a second attempt shares the data, it does not copy it.
        let info = self
            .while_unreachable(|| {
                let request = self.identified(tokio_stream::iter(chunks.clone()));
                let mut proxy = self.proxy();
                async move { proxy.put_data(request).await }
            })
            .await?
            .into_inner();
        self.uploaded(info)
    }

    /// A put of a large array to a proxy on this host: the array is written once into a
    /// region shared with the proxy, which reads it there (docs/data.md). `None` when that
    /// is not possible (no region, or the proxy did not know it: it restarted) or the proxy
    /// could not be reached: the put then sends its bytes, under the same name.
    async fn upload_shared(
        &self,
        spec: &v1::DataSpec,
        data: &[u8],
    ) -> Result<Option<v1::DataInfo>, CallError> {
        if spec.empty {
            return Ok(None);
        }
        let uploads = self.shared_uploads();
        let Some(shared) = uploads.share_array(self, data, spec.element_type).await else {
            return Ok(None);
        };
        let first = v1::DataUpload {
            spec: Some(spec.clone()),
            data: Bytes::new(),
            shared: Some(shared),
        };
        let request = self.identified(tokio_stream::iter([first]));
        match self.proxy().put_data(request).await {
            Ok(info) => Ok(Some(info.into_inner())),
            Err(status)
                if super::same_host::region_unknown(&status)
                    || super::async_client::proxy_unreachable(&status) =>
            {
                uploads.reconnect().await;
                Ok(None)
            }
            Err(status) => Err(status.into()),
        }
    }

    /// The handle a put made, its lease renewed from now on.
    fn uploaded(&self, info: v1::DataInfo) -> Result<DataRef, CallError> {
        self.renewal()
            .start(self.renewal_parts(), info.lease_until - info.created);
        DataRef::of(&info)
    }

    /// The handle's value, as little-endian bytes.
    pub async fn get_bytes(&self, data: &DataRef) -> Result<Bytes, CallError> {
        let bytes = self
            .while_unreachable(|| {
                let request = self.identified(v1::DataHandle {
                    id: data.id().to_string(),
                });
                let mut proxy = self.proxy();
                async move { received(proxy.get_data(request).await?.into_inner()).await }
            })
            .await?;
        if bytes.len() as u64 != data.nbytes() {
            return Err(CallError::new(
                ErrorKind::CommunicationFailed,
                format!(
                    "data handle `{}` came back with {} bytes, not {}",
                    data.id(),
                    bytes.len(),
                    data.nbytes()
                ),
            ));
        }
        Ok(bytes.freeze())
    }

    /// Deletes the handle and its data on the grid.
    pub async fn free(&self, data: &DataRef) -> Result<(), CallError> {
        // A free whose answer was lost with the proxy may have been done: asked again, the
        // handle is then not found, which is what was asked for.
        let maybe_done = std::sync::atomic::AtomicBool::new(false);
        let freed = self
            .while_unreachable(|| {
                let request = self.identified(v1::DataHandle {
                    id: data.id().to_string(),
                });
                let mut proxy = self.proxy();
                let maybe_done = &maybe_done;
                async move {
                    let answer = proxy.free_data(request).await;
                    if answer
                        .as_ref()
                        .is_err_and(super::async_client::broke_midway)
                    {
                        maybe_done.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    answer
                }
            })
            .await;
        match freed {
            Ok(_) => Ok(()),
            Err(status)
                if maybe_done.load(std::sync::atomic::Ordering::Relaxed)
                    && ninf_proto::net::missing_data(&status).is_some() =>
            {
                Ok(())
            }
            Err(status) => Err(status.into()),
        }
    }

    /// This client's handles, oldest first.
    pub async fn data(&self) -> Result<Vec<DataInfo>, CallError> {
        self.listed(Vec::new()).await
    }

    /// This client's handle of id `id` as the grid records it now (where its copies are);
    /// `DataNotFound` when it has none of that id.
    pub async fn data_info(&self, id: &str) -> Result<DataInfo, CallError> {
        self.listed(vec![id.to_string()])
            .await?
            .pop()
            .ok_or_else(|| {
                CallError::new(
                    ErrorKind::DataNotFound,
                    format!("data handle `{id}` is not on the grid (freed, expired, or another client's)"),
                )
            })
    }

    async fn listed(&self, ids: Vec<String>) -> Result<Vec<DataInfo>, CallError> {
        let reply = self
            .while_unreachable(|| {
                let request = self.identified(v1::ListDataRequest { ids: ids.clone() });
                let mut proxy = self.proxy();
                async move { proxy.list_data(request).await }
            })
            .await?
            .into_inner();
        reply
            .data
            .iter()
            .map(|info| {
                Ok(DataInfo {
                    data: DataRef::of(info)?,
                    servers: info.copies.iter().map(|c| c.server.clone()).collect(),
                    lease_until: info.lease_until,
                })
            })
            .collect()
    }

    /// Renews every handle's lease now (the client also does so in the background).
    pub async fn renew_data(&self) -> Result<u32, CallError> {
        let reply = self
            .while_unreachable(|| {
                let request = self.identified(v1::RenewDataRequest { ids: Vec::new() });
                let mut proxy = self.proxy();
                async move { proxy.renew_data(request).await }
            })
            .await?;
        Ok(reply.into_inner().renewed)
    }
}

/// A handle's value as the proxy streams it.
async fn received(
    mut stream: tonic::Streaming<v1::DataChunk>,
) -> Result<bytes::BytesMut, tonic::Status> {
    let mut bytes = bytes::BytesMut::new();
    while let Some(chunk) = stream.message().await? {
        if chunk.total_bytes > 0 {
            bytes.reserve(usize::try_from(chunk.total_bytes).unwrap_or(0));
        }
        bytes.extend_from_slice(&chunk.data);
    }
    Ok(bytes)
}
