// A validating admission webhook that allows everything at once: the floor any webhook costs
// (the apiserver's TLS call out and back, and decoding the review for its uid). Used by
// bench/bench_webhook.py as the "no-op webhook" column. Usage:
//
//	noop-webhook -addr 127.0.0.1:PORT -cert tls.crt -key tls.key
//
// GET /count returns how many reviews it has answered.
package main

import (
	"encoding/json"
	"flag"
	"log"
	"net/http"
	"strconv"
	"sync/atomic"
)

type review struct {
	APIVersion string `json:"apiVersion"`
	Request    struct {
		UID string `json:"uid"`
	} `json:"request"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:9444", "listen address")
	cert := flag.String("cert", "tls.crt", "serving certificate")
	key := flag.String("key", "tls.key", "serving key")
	flag.Parse()
	var answered atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/count", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(strconv.FormatInt(answered.Load(), 10)))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		var in review
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if in.APIVersion == "" {
			in.APIVersion = "admission.k8s.io/v1"
		}
		out, _ := json.Marshal(map[string]any{
			"apiVersion": in.APIVersion,
			"kind":       "AdmissionReview",
			"response":   map[string]any{"uid": in.Request.UID, "allowed": true},
		})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
		answered.Add(1)
	})
	log.Fatal(http.ListenAndServeTLS(*addr, *cert, *key, mux))
}
