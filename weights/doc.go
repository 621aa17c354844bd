// Package weights is a node's model store: the weights a catalog model
// names (a Hugging Face repository at a revision, plain HTTP(S) URLs, or a
// path already on the node) fetched once per node and shared by every
// replica there.
//
// A fetch resumes where a cut one stopped (a Range request from the bytes
// kept, which are hashed again), is verified against the source's sha256
// (the hub gives an LFS file's) and size, and is published only when every
// file is whole: hub files move into Hugging Face's cache layout
// (hub/models--org--name/blobs/<sha256>, snapshots/<commit>/<file> links,
// refs/<revision> last), so an engine with HF_HOME at the store finds them;
// URL models' directories are renamed into place. The store's records
// (.llmgw/models/<key>.json) say what it holds whole; nothing else does.
//
// Locks are flock(2) on files in the store, so they hold across processes:
// one fetch per model on the node, at most MaxConcurrent at once, each with
// its share of BytesPerSecond. BudgetBytes bounds what the store holds:
// models no live process leases (Acquire) are evicted, least recently used
// first, to make room; what cannot fit is an error naming what holds the
// room.
package weights
