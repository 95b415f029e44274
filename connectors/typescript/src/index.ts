/**
 * @transcript-owner/connector: publish delivery confirmations to transcript-owner.
 *
 * - canonicalSessionKey / sessionKeyForRoute: the worker's session keys, for every input
 *   (a port of transcript_connector/session_keys.py; parity fixed by schemas/vectors/session_keys.json).
 * - buildConfirmation / buildReset: records the worker accepts, or an InvalidRecordError
 *   naming the field.
 * - ConfirmationPublisher: idempotent, acks=all, keyed by the canonical key so each record
 *   lands in the partition the worker owns it from; optionally in transactions.
 * - verifySession / chainRoot / chainLink: the hash chain of a session's entries (a port of
 *   transcript_connector/chain.py; parity fixed by schemas/vectors/chain.json).
 */

export {
  ConnectorError,
  InvalidRecordError,
  InvalidSessionKeyError,
  PublishError,
  UnknownDmScopeError,
} from "./errors.js";
export {
  canonicalSessionKey,
  DEFAULT_ACCOUNT_ID,
  DM_SCOPES,
  type DmScope,
  type RouteLike,
  sessionKeyForRoute,
} from "./session-keys.js";
export { partitionFor } from "./partitioning.js";
export {
  buildConfirmation,
  buildReset,
  CONFIRMATION_SCHEMA,
  type ConfirmationInput,
  type DeliveryConfirmation,
  type InputRecord,
  JSON_DEPTH_LIMIT,
  type Job,
  type JobMode,
  type JsonValue,
  MAX_RECORD_BYTES,
  type Media,
  type Native,
  type Origin,
  type OriginKind,
  type Payload,
  type PeerKind,
  type Receipt,
  recordKey,
  RESET_SCHEMA,
  type ResetInput,
  type Route,
  type SessionReset,
  type Subagent,
  type TimestampInput,
  type Turn,
  validateRecord,
} from "./records.js";
export { TIMESTAMP_RANGE, timestampProblem } from "./timestamps.js";
export {
  CONFIRMATIONS_TOPIC,
  ConfirmationPublisher,
  DEFAULT_PARTITIONS_CHECK_MS,
  type Delivery,
  nextPartitionCount,
  type PublisherOptions,
  publisherOptionsFromEnv,
  type Transaction,
} from "./publisher.js";
export { isPySpace, PY_UNICODE_VERSION, pyLower, pyRepr, pyStrip } from "./pyunicode.js";
export {
  CHAIN_HEADER,
  type ChainEntry,
  type ChainFinding,
  type ChainHead,
  chainLink,
  chainRoot,
  parseChain,
  type VerifiedSession,
  verifySession,
} from "./chain.js";
