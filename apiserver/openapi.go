package apiserver

import (
	_ "embed"
	"net/http"

	"sigs.k8s.io/yaml"
)

//go:embed openapi.yaml
var openapiYAML []byte

// OpenAPI is the interface description served at /openapi.json, authored as
// YAML (anchors keep it short) and converted once at start-up.
var OpenAPI = mustJSON(openapiYAML)

func mustJSON(y []byte) []byte {
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		panic("apiserver: openapi.yaml: " + err.Error())
	}
	return j
}

func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(OpenAPI)
}
