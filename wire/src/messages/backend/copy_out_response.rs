//! CopyOutResponse: the server starts sending COPY TO STDOUT data.

use crate::codes::backend::COPY_OUT_RESPONSE;
use crate::messages::backend::copy_response::copy_response;

copy_response!(
    /// CopyOutResponse ('H').
    CopyOutResponse, COPY_OUT_RESPONSE, "CopyOutResponse"
);
