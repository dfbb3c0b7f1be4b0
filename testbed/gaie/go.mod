// Wrapper module: pins the Gateway API Inference Extension, whose CustomResourceDefinitions
// (config/crd/bases in the module) the local test cluster installs. Nothing is built from it:
// `go mod download -json sigs.k8s.io/gateway-api-inference-extension` (warmscale/localcluster/crds.py) puts the
// module in the Go module cache and prints its directory.
module warmscale.invalid/testbed/gaie

go 1.26.0

require sigs.k8s.io/gateway-api-inference-extension v1.5.0
