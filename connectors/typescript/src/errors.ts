/**
 * Every error this package throws derives from ConnectorError:
 *
 *     ConnectorError
 *     ├── InvalidSessionKeyError   a key that names no agent, or an agent id argument that is none
 *     │                            (Python: ValueError "malformed agent key" / "invalid agent_id")
 *     ├── UnknownDmScopeError      a DM scope that does not exist (Python: ValueError "unknown DM scope")
 *     ├── InvalidRecordError       a builder's input breaks the contract; `.field` names the field
 *     ├── PublishError             the publisher cannot deliver (not connected, topic, broker)
 *     ├── ReadError                a session reader cannot read (no such topic or database, broker)
 *     └── StaleReadError           a bound read did not reach its position by its deadline
 *
 * The first two and StaleReadError carry the Python implementation's message, character for
 * character.
 */

export class ConnectorError extends Error {
  override name = "ConnectorError";
}

/** `raw` is an `agent:` key whose agent segment is not an agent id, or the agent id given is none. */
export class InvalidSessionKeyError extends ConnectorError {
  override name = "InvalidSessionKeyError";
  constructor(
    message: string,
    readonly raw: string,
  ) {
    super(message);
  }
}

/** Not one of the four DM scopes. */
export class UnknownDmScopeError extends ConnectorError {
  override name = "UnknownDmScopeError";
  constructor(
    message: string,
    readonly dmScope: unknown,
  ) {
    super(message);
  }
}

/** A record that the worker would dead-letter; `field` is its path (`origin.turn`, `payload.media[0].kind`). */
export class InvalidRecordError extends ConnectorError {
  override name = "InvalidRecordError";
  constructor(
    readonly field: string,
    readonly problem: string,
  ) {
    super(field ? `${field}: ${problem}` : problem);
  }
}

/** Publishing failed; `cause` holds the Kafka client's error when there is one. */
export class PublishError extends ConnectorError {
  override name = "PublishError";
}

/**
 * A session reader cannot read at all: the source is missing, unreadable or refused (the
 * message names it); `cause` holds the client's error when there is one.
 */
export class ReadError extends ConnectorError {
  override name = "ReadError";
}

/**
 * A read bound to a position (DESIGN 1.3) did not reach it by its deadline: what the reader
 * holds may lack an entry, so it returns nothing. `partition` is the entries (and input)
 * partition, `reached` the input offset the reader's position covers, `needed` the one the
 * bound asks for; `ageS` how long ago the worker wrote the last position the reader saw (null:
 * none seen), i.e. how long the position has not moved; `reason` a sentence, when something
 * other than waiting stands in the way (a repartition in progress). The message is Python's
 * StaleReadError's.
 */
export class StaleReadError extends ConnectorError {
  override name = "StaleReadError";
  constructor(
    readonly partition: number,
    readonly reached: bigint,
    readonly needed: bigint,
    readonly ageS: number | null,
    readonly reason: string | null = null,
  ) {
    const age = ageS === null
      ? "the worker has written no position there"
      : `the worker's last position there is ${fixed1(ageS)}s old`;
    super(`stale read: partition ${partition} reached input offset ${reached}, needed ${needed}; ${age}`
      + (reason ? `; ${reason}` : ""));
  }
}

/**
 * `x` with one decimal, as Python's `f"{x:.1f}"`: both round the exact binary value, but on an
 * exact tie (x = k/4, k odd: .25, .75) Python goes to the even digit and toFixed up.
 */
export function fixed1(x: number): string {
  if (Number.isInteger(x * 4) && !Number.isInteger(x * 2)) {
    const n = Math.floor(x * 10);
    return ((n % 2 === 0 ? n : n + 1) / 10).toFixed(1);
  }
  return x.toFixed(1);
}
