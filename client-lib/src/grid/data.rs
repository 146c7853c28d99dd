//! Data kept on the grid between calls and transactions (the GridRPC data-management API;
//! docs/data.md): [`AsyncGridClient::put`] sends an array once and returns a [`DataRef`],
//! which goes in calls and transactions wherever an array does ([`super::TxArg::Data`]); the
//! array stays on a compute server until [`AsyncGridClient::free`] or until its lease runs
//! out. The client renews its handles' leases in the background while it lives.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use ninf_idl::ElementType;
use ninf_proto::descriptor::{element_type_from_proto, element_type_to_proto};
use ninf_proto::net::auth::AttachToken;
use ninf_proto::v1;
use tonic::transport::Channel;

use super::async_client::AsyncGridClient;
use crate::{ArrayRef, CallError, ErrorKind};

/// How the grid may manage a handle's data (GFD.186's management modes; docs/data.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DataMode {
    /// Kept where it was put or last written; never moved or copied by the grid.
    #[default]
    Sticky,
    /// Sticky; the same here.
    UniqueSticky,
    /// The grid may keep further copies where they make calls cheaper.
    Persistent,
}

impl DataMode {
    /// The mode's name in Python and the docs: `sticky`, `unique_sticky`, `persistent`.
    pub fn name(self) -> &'static str {
        match self {
            DataMode::Sticky => "sticky",
            DataMode::UniqueSticky => "unique_sticky",
            DataMode::Persistent => "persistent",
        }
    }

    /// The mode named `name`.
    pub fn from_name(name: &str) -> Result<DataMode, CallError> {
        match name {
            "sticky" => Ok(DataMode::Sticky),
            "unique_sticky" => Ok(DataMode::UniqueSticky),
            "persistent" => Ok(DataMode::Persistent),
            _ => Err(CallError::bad_argument(format!(
                "mode must be \"sticky\", \"unique_sticky\" or \"persistent\", got {name:?}"
            ))),
        }
    }

    fn to_proto(self) -> v1::DataMode {
        match self {
            DataMode::Sticky => v1::DataMode::Sticky,
            DataMode::UniqueSticky => v1::DataMode::UniqueSticky,
            DataMode::Persistent => v1::DataMode::Persistent,
        }
    }

    fn from_proto(mode: i32) -> DataMode {
        match v1::DataMode::try_from(mode) {
            Ok(v1::DataMode::UniqueSticky) => DataMode::UniqueSticky,
            Ok(v1::DataMode::Persistent) => DataMode::Persistent,
            _ => DataMode::Sticky,
        }
    }
}

/// A handle of data kept on the grid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataRef {
    id: String,
    element_type: ElementType,
    shape: Vec<u64>,
    fortran_order: bool,
    bytes: u64,
    mode: DataMode,
}

impl DataRef {
    /// Its id: 128 random bits, in hex.
    pub fn id(&self) -> &str {
        &self.id
    }
    pub fn element_type(&self) -> ElementType {
        self.element_type
    }
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }
    /// Whether the shape is in Fortran (column-major) order.
    pub fn fortran_order(&self) -> bool {
        self.fortran_order
    }
    pub fn nbytes(&self) -> u64 {
        self.bytes
    }
    /// Elements it holds.
    pub fn len(&self) -> usize {
        (self.bytes / self.element_type.size_bytes().unwrap_or(1).max(1)) as usize
    }
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }
    pub fn mode(&self) -> DataMode {
        self.mode
    }

    fn of(info: &v1::DataInfo) -> Result<DataRef, CallError> {
        let spec = info.spec.clone().unwrap_or_default();
        let element_type = v1::ElementType::try_from(spec.element_type)
            .ok()
            .and_then(element_type_from_proto)
            .ok_or_else(|| {
                CallError::new(
                    ErrorKind::CommunicationFailed,
                    format!("data handle `{}` has an unknown element type", info.id),
                )
            })?;
        Ok(DataRef {
            id: info.id.clone(),
            element_type,
            shape: spec.shape,
            fortran_order: spec.fortran_order,
            bytes: spec.bytes,
            mode: DataMode::from_proto(spec.mode),
        })
    }
}

/// A handle as the grid records it now.
#[derive(Debug, Clone, PartialEq)]
pub struct DataInfo {
    pub data: DataRef,
    /// The servers holding a copy (none until a value is written).
    pub servers: Vec<String>,
    /// Unix seconds: when it is deleted unless renewed.
    pub lease_until: f64,
}

/// The background renewal of a client's handles: started with its first handle, stopped
/// when the last clone of the client goes.
#[derive(Default)]
pub(crate) struct Renewal(Mutex<Option<tokio::task::JoinHandle<()>>>);

impl Drop for Renewal {
    fn drop(&mut self) {
        if let Some(task) = ninf_proto::sync::lock(&self.0).take() {
            task.abort();
        }
    }
}

impl Renewal {
    fn start(
        &self,
        (channel, token, identity): (Channel, AttachToken, tonic::metadata::AsciiMetadataValue),
        lease_seconds: f64,
    ) {
        let mut task = ninf_proto::sync::lock(&self.0);
        if task.is_some() {
            return;
        }
        let period = std::time::Duration::from_secs_f64((lease_seconds / 4.0).max(0.05));
        *task = Some(tokio::spawn(async move {
            let mut ticker = tokio::time::interval(period);
            ticker.tick().await;
            loop {
                ticker.tick().await;
                let mut proxy =
                    v1::proxy_client::ProxyClient::with_interceptor(channel.clone(), token.clone());
                let mut request = tonic::Request::new(v1::RenewDataRequest { ids: Vec::new() });
                request
                    .metadata_mut()
                    .insert(ninf_proto::net::CLIENT_ID_METADATA, identity.clone());
                if let Err(status) = proxy.renew_data(request).await {
                    tracing::debug!(error = %status.message(), "renewing data handles failed");
                }
            }
        }));
    }
}

impl AsyncGridClient {
    /// Sends `array` (of `shape`, or one dimension when empty) once and keeps it on the grid.
    pub async fn put(
        &self,
        array: ArrayRef<'_>,
        shape: &[u64],
        mode: DataMode,
    ) -> Result<DataRef, CallError> {
        let bytes = Bytes::copy_from_slice(&array.le_bytes());
        let shape = Shape {
            dims: shape,
            fortran_order: false,
        };
        self.put_bytes(array.element_type(), shape, bytes, mode)
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
        let spec = spec(element_type, shape, data.len() as u64, mode, false)?;
        self.upload(spec, data).await
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
        self.upload(spec, Bytes::new()).await
    }

    async fn upload(&self, spec: v1::DataSpec, data: Bytes) -> Result<DataRef, CallError> {
        const CHUNK: usize = 1 << 20;
        let mut chunks = vec![v1::DataUpload {
            spec: Some(spec),
            data: Bytes::new(),
        }];
        let mut offset = 0;
        while offset < data.len() {
            let end = (offset + CHUNK).min(data.len());
            chunks.push(v1::DataUpload {
                spec: None,
                data: data.slice(offset..end),
            });
            offset = end;
        }
        let request = self.identified(tokio_stream::iter(chunks));
        let info = self.proxy().put_data(request).await?.into_inner();
        self.renewal()
            .start(self.renewal_parts(), info.lease_until - info.created);
        DataRef::of(&info)
    }

    /// The handle's value, as little-endian bytes.
    pub async fn get_bytes(&self, data: &DataRef) -> Result<Bytes, CallError> {
        let request = self.identified(v1::DataHandle {
            id: data.id.clone(),
        });
        let mut stream = self.proxy().get_data(request).await?.into_inner();
        let mut bytes = bytes::BytesMut::new();
        while let Some(chunk) = stream.message().await? {
            if chunk.total_bytes > 0 {
                bytes.reserve(usize::try_from(chunk.total_bytes).unwrap_or(0));
            }
            bytes.extend_from_slice(&chunk.data);
        }
        if bytes.len() as u64 != data.bytes {
            return Err(CallError::new(
                ErrorKind::CommunicationFailed,
                format!(
                    "data handle `{}` came back with {} bytes, not {}",
                    data.id,
                    bytes.len(),
                    data.bytes
                ),
            ));
        }
        Ok(bytes.freeze())
    }

    /// Deletes the handle and its data on the grid.
    pub async fn free(&self, data: &DataRef) -> Result<(), CallError> {
        let request = self.identified(v1::DataHandle {
            id: data.id.clone(),
        });
        self.proxy().free_data(request).await?;
        Ok(())
    }

    /// This client's handles, oldest first.
    pub async fn data(&self) -> Result<Vec<DataInfo>, CallError> {
        let request = self.identified(v1::ListDataRequest {});
        let reply = self.proxy().list_data(request).await?.into_inner();
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
        let request = self.identified(v1::RenewDataRequest { ids: Vec::new() });
        Ok(self.proxy().renew_data(request).await?.into_inner().renewed)
    }
}

/// An array's shape, for the client that reads it back: its dimensions (one, of every
/// element, when empty) and whether they are in Fortran (column-major) order.
#[derive(Debug, Clone, Copy, Default)]
pub struct Shape<'a> {
    pub dims: &'a [u64],
    pub fortran_order: bool,
}

fn spec(
    element_type: ElementType,
    Shape {
        dims: shape,
        fortran_order,
    }: Shape<'_>,
    bytes: u64,
    mode: DataMode,
    empty: bool,
) -> Result<v1::DataSpec, CallError> {
    let size = element_type
        .size_bytes()
        .filter(|&s| s > 0)
        .ok_or_else(|| {
            CallError::bad_argument(format!(
                "data on the grid must be an array of numbers, not {}",
                element_type.keyword()
            ))
        })?;
    let shape = if shape.is_empty() {
        vec![bytes / size]
    } else {
        shape.to_vec()
    };
    if shape.iter().product::<u64>() * size != bytes {
        return Err(CallError::bad_argument(format!(
            "shape {shape:?} of {} holds {} bytes, not {bytes}",
            element_type.keyword(),
            shape.iter().product::<u64>() * size
        )));
    }
    Ok(v1::DataSpec {
        element_type: element_type_to_proto(element_type).into(),
        bytes,
        shape,
        mode: mode.to_proto().into(),
        empty,
        replicas: 0,
        fortran_order,
    })
}

/// The renewal state every clone of one client shares.
pub(crate) type SharedRenewal = Arc<Renewal>;
