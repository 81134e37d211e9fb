package kind

import "strings"

// The workloads' image: the test registry's busybox, pulled into Docker
// and put into the nodes with `kind load` (nothing in a node can reach
// the host's registry), so every pod runs it with imagePullPolicy Never.
const busybox = "berth.test/busybox:1.36"

// web: three replicas of an HTTP server on :8080 spread over both workers
// (the control plane is tainted; Honor keeps it out of the skew count), a
// Service for all of them and one (web-a) for the replica the test labels
// side=a, so that a client on the other worker provably crosses nodes.
const webManifests = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
        nodeTaintsPolicy: Honor
        labelSelector: {matchLabels: {app: web}}
      containers:
      - name: server
        image: IMAGE
        imagePullPolicy: Never
        command: [sh, -c, 'mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www']
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 2}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web-a}
spec:
  selector: {app: web, side: a}
  ports: [{port: 80, targetPort: 8080}]
`

// The pods bound to a worker: a client, a server on a host port, a
// logger, a container that reads one line from an attached stdin, and
// one that crashes (exit 7) when /tmp/crash appears.
const nodePods = `
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  nodeName: W2
  containers:
  - {name: client, image: IMAGE, imagePullPolicy: Never, command: [sleep, "3600"]}
---
apiVersion: v1
kind: Pod
metadata: {name: hostport}
spec:
  nodeName: W1
  containers:
  - name: server
    image: IMAGE
    imagePullPolicy: Never
    command: [sh, -c, 'mkdir -p /www && echo hostport-ok > /www/index.html && exec httpd -f -p 8080 -h /www']
    ports: [{containerPort: 8080, hostPort: 18080}]
---
apiVersion: v1
kind: Pod
metadata: {name: logger}
spec:
  nodeName: W1
  containers:
  - {name: logger, image: IMAGE, imagePullPolicy: Never, command: [sh, -c, 'i=0; while true; do i=$((i+1)); echo line-$i; sleep 0.2; done']}
---
apiVersion: v1
kind: Pod
metadata: {name: attachee}
spec:
  nodeName: W2
  containers:
  - {name: reader, image: IMAGE, imagePullPolicy: Never, stdin: true, command: [sh, -c, 'while read l; do echo got:$l; done; sleep 3600']}
---
apiVersion: v1
kind: Pod
metadata: {name: crasher}
spec:
  nodeName: W1
  containers:
  - {name: crasher, image: IMAGE, imagePullPolicy: Never, command: [sh, -c, 'while [ ! -e /tmp/crash ]; do sleep 1; done; exit 7']}
`

// markerPod runs the image built with docker and loaded with kind.
const markerPod = `
apiVersion: v1
kind: Pod
metadata: {name: marker}
spec:
  restartPolicy: Never
  nodeName: W1
  containers:
  - {name: marker, image: berth.test/marker:v1, imagePullPolicy: Never, command: [cat, /marker]}
`

func manifest(m, w1, w2 string) string {
	return strings.NewReplacer("IMAGE", busybox, "W1", w1, "W2", w2).Replace(m)
}
