//! CopyInResponse: the server is ready to receive COPY FROM STDIN data.

use crate::codes::backend::COPY_IN_RESPONSE;
use crate::messages::backend::copy_response::copy_response;

copy_response!(
    /// CopyInResponse ('G').
    CopyInResponse, COPY_IN_RESPONSE, "CopyInResponse"
);
