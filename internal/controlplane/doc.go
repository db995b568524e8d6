// Package controlplane owns both ends of the config wire between the
// operator and its sidecars, so that they are built and tested together.
//
// Encoding: each tier's config is one envoy.config.core.v3
// TypedExtensionConfig named "<namespace>/<tier>" whose typed_config is an
// xds.type.v3.TypedStruct of type "tiercache.io/v1alpha1/SidecarConfig"
// carrying the JSON form of tierconfig.Config as a Struct (Encode, Decode).
// Its version is the hex sha256 of the canonical JSON of the config with
// defaults filled in (Version), so every operator replica and every restart
// publishes the same version for the same config.
//
// Server (operator side) serves aggregated SotW xDS over gRPC with
// go-control-plane's SotW stream server, one snapshot per tier keyed by the
// node's cluster field. Client (sidecar side) is a small ADS client of our
// own: it subscribes to its tier's resource, decodes and validates each
// new version, applies it through a hook, persists it as the last good
// config, and ACKs; it NACKs what it cannot decode, validate or apply and
// keeps the config in effect. (go-control-plane's pkg/client/sotw/v3
// cannot send resource names or the version already held on connect, and
// holds its mutex across Recv.)
//
// Why the Server does not use go-control-plane's SnapshotCache: a NACK
// carries the last version the sidecar accepted, so the stock cache sees a
// version that differs from the snapshot and answers at once with the
// version just rejected, forever. And ClearSnapshot discards the open
// watches of the node, so sidecars connected when a tier is deleted would
// never hear of it being created again. tierCache is a thin
// cache.ConfigWatcher of our own (one resource per tier, SotW only):
//
//   - NACK parking: a watch remembers the version its client knows. For a
//     NACK that is not the request's version_info but the version the
//     stream last returned (the subscription's ReturnedResources, which
//     the SotW server records as it sends), i.e. the rejected one. The
//     watch is answered only when the tier's version differs from it, so a
//     NACKed watch waits until the next Publish for that tier, and a
//     Publish that raced ahead of the NACK is sent at once.
//   - Clear withdraws the resource but keeps the watches, which a later
//     Publish answers.
//   - A stream that has not been sent the resource yet is answered even
//     when its version_info already matches (a reconnecting sidecar), so it
//     holds the resource on the stream; the Client then ACKs without
//     applying.
//
// Connected sidecars and NACKs per tier are tracked from the server's
// stream callbacks (stream to tier on its first request; the version last
// sent on each stream names the version a NACK rejects). Each stream also
// remembers the version its sidecar holds (the version_info of every
// request, ACK or NACK) and the version its latest answer refused, so that
// Sidecars can say how many sidecars run which version and how many
// refused one; OnChange signals each change, for a report that is written
// at its own pace.
//
// The same server carries the invalidation relay (relay.go): the sealed
// purge messages of tiers without L2, between the sidecars of a tier and
// between operator replicas, authenticated as the xDS streams are.
//
// Shutdown: xDS streams never end on their own, so Serve ends them through
// the SotW server's context and waits, up to a deadline, for their
// handlers to return before closing connections. It does not use gRPC's
// GracefulStop, which waits without bound for a handler stuck in a
// callback.
package controlplane
