/**
 * Every error this package throws derives from ConnectorError:
 *
 *     ConnectorError
 *     ├── InvalidSessionKeyError   a key that names no agent, or an agent id argument that is none
 *     │                            (Python: ValueError "malformed agent key" / "invalid agent_id")
 *     ├── UnknownDmScopeError      a DM scope that does not exist (Python: ValueError "unknown DM scope")
 *     ├── InvalidRecordError       a builder's input breaks the contract; `.field` names the field
 *     └── PublishError             the publisher cannot deliver (not connected, topic, broker)
 *
 * The first two carry the Python implementation's message, character for character.
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
