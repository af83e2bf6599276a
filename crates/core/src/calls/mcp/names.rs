//! The MCP vocabulary as bounded label values: methods
//! (`mcp.method.name`) and how a call ended (`error.type`).

crate::names::label_enum! {
    /// The MCP method of a request (`mcp.method.name`); methods outside
    /// the specification are `other`.
    pub enum McpMethod {
        Initialize = "initialize",
        Ping = "ping",
        ServerDiscover = "server/discover",
        ToolsList = "tools/list",
        ToolsCall = "tools/call",
        ResourcesList = "resources/list",
        ResourceTemplatesList = "resources/templates/list",
        ResourcesRead = "resources/read",
        ResourcesSubscribe = "resources/subscribe",
        ResourcesUnsubscribe = "resources/unsubscribe",
        SubscriptionsListen = "subscriptions/listen",
        PromptsList = "prompts/list",
        PromptsGet = "prompts/get",
        CompletionComplete = "completion/complete",
        LoggingSetLevel = "logging/setLevel",
        TasksGet = "tasks/get",
        TasksResult = "tasks/result",
        TasksList = "tasks/list",
        TasksCancel = "tasks/cancel",
        SamplingCreateMessage = "sampling/createMessage",
        ElicitationCreate = "elicitation/create",
        RootsList = "roots/list",
        Other = "other",
    }
}

impl McpMethod {
    pub fn of(method: &str) -> McpMethod {
        McpMethod::from_label(method)
            .filter(|m| *m != McpMethod::Other)
            .unwrap_or(McpMethod::Other)
    }
}

crate::names::label_enum! {
    /// How an MCP call ended (`error.type`; empty when it succeeded).
    /// JSON-RPC codes the specifications name are their own value; other
    /// codes of the server range are `server_error`, any other code
    /// `_OTHER`; the rest are tokentap's transport classes.
    #[derive(Default)]
    pub enum McpError {
        #[default]
        None = "",
        /// A `tools/call` result with `isError: true`.
        ToolError = "tool_error",
        ParseError = "-32700",
        InvalidRequest = "-32600",
        MethodNotFound = "-32601",
        InvalidParams = "-32602",
        InternalError = "-32603",
        ResourceNotFound = "-32002",
        HeaderMismatch = "-32020",
        MissingClientCapability = "-32021",
        UnsupportedProtocolVersion = "-32022",
        UrlElicitationRequired = "-32042",
        /// Another code in -32000..=-32099 (implementation-defined).
        ServerError = "server_error",
        /// A code outside the reserved ranges.
        Other = "_OTHER",
        /// The HTTP answer was an error status and named no JSON-RPC answer.
        HttpError = "http_error",
        /// The upstream connection failed or broke before the answer.
        TransportError = "transport_error",
        /// The client went away before the answer.
        Cancelled = "cancelled",
        /// The response stream ended without this call's answer.
        NoResponse = "no_response",
        /// No answer within the tap's pending-call timeout (the older
        /// HTTP+SSE transport).
        Timeout = "timeout",
        /// The answer could not be read (too large, not JSON-RPC).
        Unmeasured = "unmeasured",
    }
}

impl McpError {
    /// The class of a JSON-RPC error code.
    pub fn of_code(code: i64) -> McpError {
        match code {
            -32700 => McpError::ParseError,
            -32600 => McpError::InvalidRequest,
            -32601 => McpError::MethodNotFound,
            -32602 => McpError::InvalidParams,
            -32603 => McpError::InternalError,
            -32002 => McpError::ResourceNotFound,
            -32020 => McpError::HeaderMismatch,
            -32021 => McpError::MissingClientCapability,
            -32022 => McpError::UnsupportedProtocolVersion,
            -32042 => McpError::UrlElicitationRequired,
            -32099..=-32000 => McpError::ServerError,
            _ => McpError::Other,
        }
    }

    pub fn is_ok(self) -> bool {
        self == McpError::None
    }

    /// The server answered (a result, a tool error or a JSON-RPC error):
    /// the call has a response whose size counts.
    pub fn is_answered(self) -> bool {
        !matches!(
            self,
            McpError::HttpError
                | McpError::TransportError
                | McpError::Cancelled
                | McpError::NoResponse
                | McpError::Timeout
                | McpError::Unmeasured
        )
    }
}
