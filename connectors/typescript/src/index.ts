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
 * - SessionReader: a gateway's read of one session bound to LATEST or to a Delivery, from the
 *   topic or a sink database, or StaleReadError (DESIGN 1.3); classify: what a record of
 *   transcript.entries is (a port of transcript_connector/entries_topic.py; parity fixed by
 *   schemas/vectors/positions.json).
 */

export {
  ConnectorError,
  InvalidRecordError,
  InvalidSessionKeyError,
  PublishError,
  ReadError,
  StaleReadError,
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
export { TIMESTAMP_RANGE, timestampMicros, timestampProblem } from "./timestamps.js";
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
  CHAIN_SINCE,
  type ChainEntry,
  type ChainFinding,
  type ChainHead,
  chainLink,
  chainRoot,
  headerText,
  parseChain,
  type VerifiedSession,
  verifySession,
  writtenSeconds,
} from "./chain.js";
export {
  chainHeader,
  classify,
  type Classified,
  decodePosition,
  ENTRY_SCHEMA,
  entryKey,
  type EntryRecord,
  type ErasedRecord,
  furthest,
  noPosition,
  parseEntryKey,
  parsePositionKey,
  type Position,
  positionAgeS,
  POSITION_PREFIX,
  POSITION_SCHEMA,
  positionKey,
  type PositionRecord,
  positionValue,
  type RecordHeaders,
  type SkippedRecord,
} from "./entries-topic.js";
export {
  type DeliveryBound,
  deliveryOffset,
  type EarlierCounts,
  earlierCounts,
  LATEST,
  LruMap,
  parseBound,
  planRead,
  type ReadBound,
  type ReadStep,
  repartitionReason,
} from "./read-plan.js";
export { HeldSession, PartitionView, type SessionEntry, type SessionSnapshot } from "./session-view.js";
export {
  SELECT_POSITION,
  SELECT_SESSION,
  SINK_APPLICATION_ID,
  SINK_POSITIONS_SINCE,
  SINK_SCHEMA_VERSION,
  SinkDatabase,
} from "./sink-database.js";
export {
  DEFAULT_READ_TIMEOUT_MS,
  DEFAULT_SESSIONS_PER_PARTITION,
  ENTRIES_TOPIC,
  LAYOUT_TOPIC,
  type ReadWait,
  type SessionRead,
  SessionReader,
  type SessionReaderOptions,
} from "./reader.js";
export type { ReaderCluster } from "./reader-kafka.js";
