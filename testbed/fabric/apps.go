package fabric

// GradientBytes is the bytes one replica of the Pollux artifact's
// application app (its name in the traces and workloads) synchronises
// per step: its model's trainable parameters as 32-bit floats, counted
// from the artifact's own model definitions (docs/fidelity.md, Part 3,
// gives each model's configuration). ok is false for an application it
// does not know.
func GradientBytes(app string) (bytes float64, ok bool) {
	params, ok := parameters[app]
	return 4 * params, ok
}

// parameters is each application's count of trainable parameters.
var parameters = map[string]float64{
	"imagenet":    25_557_032,  // torchvision ResNet-50
	"cifar10":     11_173_962,  // the artifact's ResNet18
	"deepspeech2": 41_187_968,  // DeepSpeech2, 5 bidirectional GRU layers of 800
	"yolov3":      61_626_049,  // YOLOv3 for the 20 PASCAL VOC classes
	"bert":        109_483_778, // bert-base-uncased with the SQuAD span head
	"ncf":         1_602_657,   // NeuMF-end on MovieLens-1M
}
