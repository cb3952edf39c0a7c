#!/bin/sh
# Grade the course on Kubernetes, then merge: sh docs/cluster/grade-k8s.sh
# Kubernetes has no dependencies between Jobs, so this waits for the grading Job to end, complete or failed
# (an index out of retries), and then starts the merge either way. It exits 1 when the merge named
# submissions without a completed grade (kubectl logs job/merge-attention says which, and their shards).
set -eu
here=$(dirname "$0")

ended() {  # the Job's final condition, Complete or Failed, once it has one
    until state=$(kubectl get "job/$1" -o jsonpath='{.status.conditions[?(@.status=="True")].type}' |
        grep -owE 'Complete|Failed'); do
        sleep 30
    done
    echo "$state"
}

kubectl apply -f "$here/grade-job.yaml"
echo "grading: $(ended grade-attention)"
kubectl delete job/merge-attention --ignore-not-found
kubectl apply -f "$here/merge-job.yaml"
[ "$(ended merge-attention)" = Complete ]
