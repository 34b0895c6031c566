import {
	AbsoluteFill,
	Audio,
	CalculateMetadataFunction,
	staticFile,
	useCurrentFrame,
} from 'remotion';

// Very small and fast composition for automated tests. With `tone: true` it has an
// audio track too (public/tone.wav, a 2 s 440 Hz sine, looped): the chunked-render
// tests join its audio.
export type TinyProps = {
	frames: number;
	color: string;
	tone?: boolean;
};

export const tinyMetadata: CalculateMetadataFunction<TinyProps> = ({props}) => {
	const frames = Number(props.frames);
	return {
		durationInFrames:
			Number.isFinite(frames) && frames >= 1 ? Math.floor(frames) : 12,
	};
};

export const Tiny: React.FC<TinyProps> = ({color, tone}) => {
	const frame = useCurrentFrame();
	return (
		<AbsoluteFill
			style={{
				backgroundColor: color,
				color: 'white',
				fontFamily: 'DejaVu Sans, sans-serif',
				fontSize: 48,
				justifyContent: 'center',
				alignItems: 'center',
			}}
		>
			{tone ? <Audio src={staticFile('tone.wav')} loop /> : null}
			{frame}
		</AbsoluteFill>
	);
};
