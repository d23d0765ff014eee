//! CopyBothResponse: both sides stream CopyData (streaming replication).

use crate::codes::backend::COPY_BOTH_RESPONSE;
use crate::messages::backend::copy_response::copy_response;

copy_response!(
    /// CopyBothResponse ('W').
    CopyBothResponse, COPY_BOTH_RESPONSE, "CopyBothResponse"
);
