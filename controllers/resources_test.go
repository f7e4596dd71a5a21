package controllers

import "testing"

func TestParseResources(t *testing.T) {
	rr, err := ParseResources(`{"requests":{"cpu":"250m","memory":"256Mi"},"limits":{"memory":"1Gi"}}`)
	if err != nil || rr.Requests.Cpu().String() != "250m" || rr.Limits.Memory().String() != "1Gi" {
		t.Fatalf("%+v %v", rr, err)
	}
	if _, err := ParseResources(`{"request":{"cpu":"1"}}`); err == nil {
		t.Fatal("a misspelt field was accepted")
	}
	if rr, err := ParseResources(""); err != nil || len(rr.Requests) != 0 {
		t.Fatalf("empty: %+v %v", rr, err)
	}
}
